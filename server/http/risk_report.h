// The `witcert` object every response carries: what the certificate says about this
// request's attention error, and the gate policy it ran under.
//
// {"scheme": "int8-rtn/int8-rtn", "gate": "repair", "tv_threshold", "delta", "delta_spent",
//  "cells", "tv_bound": {"max_before", "mean_before", "max_after", "mean_after"},
//  "coverage", "pageins", "uncertified_cells", "uncertified_heads": [[layer, head], …]}
#pragma once

#include <string>

#include "engine/cert/records.h"
#include "engine/gate/gate_policy.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_request.h"

namespace witcert::http {

const char* GateModeText(GateMode mode);

// The policy a request asks for: `base` with the request's fields replaced. The engine then
// tightens the policy in force with it, so a looser field has no effect.
GatePolicy MakeGateRequest(const GateRequest& request, const GatePolicy& base);

nlohmann::json GatePolicyJson(const GatePolicy& policy);
nlohmann::json RiskReport(const RiskSummary& risk, const GatePolicy& policy,
                          const std::string& k_scheme, const std::string& v_scheme);
// One-line summary for the request log.
std::string RiskLogLine(const RiskSummary& risk);

}  // namespace witcert::http
