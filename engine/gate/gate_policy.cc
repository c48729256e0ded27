#include "engine/gate/gate_policy.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace witcert {

GatePolicy Tighten(const GatePolicy& base, const GatePolicy& req) {
  GatePolicy r;
  r.mode = std::max(base.mode, req.mode);
  r.tv_threshold = std::min(base.tv_threshold, req.tv_threshold);
  if (base.v_threshold <= 0) r.v_threshold = req.v_threshold;
  else if (req.v_threshold <= 0) r.v_threshold = base.v_threshold;
  else r.v_threshold = std::min(base.v_threshold, req.v_threshold);
  r.delta_req = (base.delta_req <= 0 || req.delta_req <= 0) ? 0.0
                                                            : std::min(base.delta_req, req.delta_req);
  r.pagein_budget_per_step = std::max(base.pagein_budget_per_step, req.pagein_budget_per_step);
  r.exact_cache_blocks = std::max(base.exact_cache_blocks, req.exact_cache_blocks);
  r.audit_rate = std::max(base.audit_rate, req.audit_rate);
  r.tier_b_form = std::min(base.tier_b_form, req.tier_b_form);  // ordered tightest first
  return r;
}

GatePolicy LoosestGatePolicy() {
  GatePolicy p;
  p.mode = GateMode::kOff;
  p.tv_threshold = std::numeric_limits<float>::infinity();
  p.v_threshold = 0.0f;  // "not checked": Tighten keeps the base's
  p.delta_req = 1.0;
  p.pagein_budget_per_step = 0;
  p.exact_cache_blocks = 0;
  p.audit_rate = 0.0;
  p.tier_b_form = meter::TierBForm::kSplitMax;  // "no preference": Tighten keeps the base's
  return p;
}

const char* GateModeName(GateMode mode) {
  switch (mode) {
    case GateMode::kOff: return "off";
    case GateMode::kObserve: return "observe";
    case GateMode::kRepair: return "repair";
  }
  return "off";
}

absl::Status CheckGateOverride(std::string_view key, std::string_view field, double value) {
  const double hi = key == "v_threshold" ? 1e9 : 1.0;
  if (!(value > 0.0 && value <= hi)) {
    return absl::InvalidArgumentError(absl::StrFormat("'%s' must be in (0, %g]", field, hi));
  }
  return absl::OkStatus();
}

absl::StatusOr<GateMode> ParseGateMode(std::string_view name) {
  if (name == "off") return GateMode::kOff;
  if (name == "observe") return GateMode::kObserve;
  if (name == "repair") return GateMode::kRepair;
  return absl::InvalidArgumentError(
      absl::StrCat("gate mode must be off, observe or repair, got '", std::string(name), "'"));
}

absl::StatusOr<meter::TierBForm> ParseTierBForm(std::string_view name) {
  std::string names;
  for (meter::TierBForm f : meter::kTierBForms) {
    if (name == meter::TierBFormName(f)) return f;
    absl::StrAppend(&names, names.empty() ? "" : ", ", meter::TierBFormName(f));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Tier B form must be one of ", names, ", got '", std::string(name), "'"));
}

absl::Status ValidateGatePolicy(const GatePolicy& p) {
  if (!(p.tv_threshold >= 0.0f && p.tv_threshold <= 1.0f))
    return absl::InvalidArgumentError("tv_threshold must be in [0, 1]");
  if (!(p.v_threshold >= 0.0f && p.v_threshold < 1e30f))
    return absl::InvalidArgumentError("v_threshold must be >= 0");
  if (!(p.delta_req >= 0.0 && p.delta_req < 1.0))
    return absl::InvalidArgumentError("delta must be in [0, 1)");
  if (p.pagein_budget_per_step < 0)
    return absl::InvalidArgumentError("pagein_budget must be >= 0");
  if (p.exact_cache_blocks < 0)
    return absl::InvalidArgumentError("exact_cache_blocks must be >= 0");
  if (!(p.audit_rate >= 0.0 && p.audit_rate <= 1.0))
    return absl::InvalidArgumentError("audit_rate must be in [0, 1]");
  return absl::OkStatus();
}

double LocalDelta(double delta_req, int32_t num_layers, int32_t num_q_heads, int64_t max_steps) {
  if (delta_req <= 0 || num_layers <= 0 || num_q_heads <= 0 || max_steps <= 0) return 0.0;
  return delta_req / (static_cast<double>(num_layers) * num_q_heads * max_steps);
}

}  // namespace witcert
