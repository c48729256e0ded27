#include "server/http/risk_report.h"

#include <charconv>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace witcert::http {

using nlohmann::json;

namespace {
// A float threshold as the decimal the operator wrote (0.05, not 0.0500000007).
double Shortest(float f) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  return std::strtod(std::string(buf, end).c_str(), nullptr);
}
}  // namespace

const char* GateModeText(GateMode mode) {
  switch (mode) {
    case GateMode::kOff: return "off";
    case GateMode::kObserve: return "observe";
    case GateMode::kRepair: return "repair";
  }
  return "off";
}

GatePolicy MakeGateRequest(const GateRequest& r, const GatePolicy& base) {
  GatePolicy p = base;
  if (r.mode) {
    p.mode = *r.mode == "repair" ? GateMode::kRepair
             : *r.mode == "observe" ? GateMode::kObserve
                                    : GateMode::kOff;
  }
  if (r.tv_threshold) p.tv_threshold = static_cast<float>(*r.tv_threshold);
  if (r.v_threshold) p.v_threshold = static_cast<float>(*r.v_threshold);
  if (r.delta) p.delta_req = *r.delta;
  if (r.pagein_budget) p.pagein_budget_per_step = *r.pagein_budget;
  if (r.tier_b_form) {
    if (absl::StatusOr<meter::TierBForm> form = ParseTierBForm(*r.tier_b_form); form.ok()) p.tier_b_form = *form;
  }
  return p;
}

json GatePolicyJson(const GatePolicy& p) {
  return {{"mode", GateModeText(p.mode)},
          {"tv_threshold", Shortest(p.tv_threshold)},
          {"v_threshold", Shortest(p.v_threshold)},
          {"delta", p.delta_req},
          {"tier_b_form", meter::TierBFormName(p.tier_b_form)},
          {"pagein_budget", p.pagein_budget_per_step},
          {"exact_cache_blocks", p.exact_cache_blocks},
          {"audit_rate", p.audit_rate}};
}

json RiskReport(const RiskSummary& r, const GatePolicy& policy, const std::string& k_scheme,
                const std::string& v_scheme) {
  json heads = json::array();
  for (const auto& [layer, head] : r.uncertified_heads) heads.push_back({layer, head});
  return {{"scheme", k_scheme == v_scheme ? k_scheme : k_scheme + "/" + v_scheme},
          {"k_scheme", k_scheme},
          {"v_scheme", v_scheme},
          {"gate", GateModeText(policy.mode)},
          {"tv_threshold", Shortest(policy.tv_threshold)},
          {"delta", policy.delta_req},
          {"tier_b_form", meter::TierBFormName(policy.tier_b_form)},
          {"delta_spent", r.delta_spent},
          {"cells", r.cells},
          {"tv_bound",
           {{"max_before", r.max_tv_before},
            {"mean_before", r.mean_tv_before},
            {"max_after", r.max_tv_after},
            {"mean_after", r.mean_tv_after}}},
          {"coverage", r.coverage},
          {"pageins", r.pageins},
          {"uncertified_cells", r.uncertified_cells},
          {"uncertified_heads", heads}};
}

std::string RiskLogLine(const RiskSummary& r) {
  return absl::StrFormat(
      "cert: cells=%d coverage=%.4f tv_max=%.3g→%.3g tv_mean=%.3g→%.3g pageins=%d "
      "uncertified=%d heads=%d delta_spent=%.3g",
      r.cells, r.coverage, r.max_tv_before, r.max_tv_after, r.mean_tv_before, r.mean_tv_after,
      r.pageins, r.uncertified_cells, r.uncertified_heads.size(), r.delta_spent);
}

}  // namespace witcert::http
