#include "engine/gate/gate_policy.h"

#include <algorithm>

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
  return r;
}

double LocalDelta(double delta_req, int32_t num_layers, int32_t num_q_heads, int64_t max_steps) {
  if (delta_req <= 0 || num_layers <= 0 || num_q_heads <= 0 || max_steps <= 0) return 0.0;
  return delta_req / (static_cast<double>(num_layers) * num_q_heads * max_steps);
}

}  // namespace witcert
