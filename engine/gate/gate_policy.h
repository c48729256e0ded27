// The gate's policy (certificates.md §6): mode, thresholds, budgets. The operator's policy
// is swapped atomically on reload (PolicyHolder); a request may only tighten it (Tighten).
#pragma once

#include <cstdint>
#include <memory>

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/meter/tier_b_form.h"

namespace witcert {

enum class GateMode { kOff, kObserve, kRepair };  // ordered: looser < stricter

struct GatePolicy {
  GateMode mode = GateMode::kObserve;
  float tv_threshold = 0.05f;      // certified: TV bound ≤ this
  float v_threshold = 0.0f;        // and ‖o−õ‖/‖õ‖ bound ≤ this (0: not checked)
  double delta_req = 0.0;          // Tier B budget per request (0: Tier B off)
  int32_t pagein_budget_per_step = 4;  // exact blocks per MeteredDecodeAttention call
  int64_t exact_cache_blocks = 16384;
  double audit_rate = 0.0;         // fraction of cells audited
  // How Tier B cells (int8-dither, δ > 0) are certified (meter::TierBForm): per-token min(ε, u_t)
  // (the default, never looser), u_t alone per token (scale-only: no key witness read), or
  // split-max (a split's largest u_t and ρ_t: almost no meter work a token in the CUDA
  // tensor-core kernel). An operator setting: a request's Tighten keeps the tighter form.
  meter::TierBForm tier_b_form = meter::TierBForm::kPerToken;
};

// The stricter of each field: mode max, thresholds min (0 = unset for v_threshold), δ min
// (0 = Tier B off is strictest), page-in budget and audit rate max (more repair / more
// checking), exact cache size max.
GatePolicy Tighten(const GatePolicy& base, const GatePolicy& request);

// The policy that tightens nothing: Tighten(base, Loosest()) == base. Requests start from it
// and set only the fields they mean to tighten.
GatePolicy LoosestGatePolicy();

const char* GateModeName(GateMode mode);  // "off", "observe", "repair"
// The config's gate.tier_b_form name (meter::TierBFormName) to GatePolicy::tier_b_form; an
// error names the accepted forms.
absl::StatusOr<meter::TierBForm> ParseTierBForm(std::string_view name);
absl::StatusOr<GateMode> ParseGateMode(std::string_view name);
// A request's override of one of the gate's numbers, `key` "tv_threshold", "delta" (both in
// (0, 1]) or "v_threshold" (in (0, 1e9]): the ranges every front end accepts (a 0 or a NaN would
// switch a check off or tighten to nothing). InvalidArgument naming `field` — the front end's
// spelling of the key — otherwise.
absl::Status CheckGateOverride(std::string_view key, std::string_view field, double value);
// Ranges: thresholds in [0, 1] (v_threshold ≥ 0), δ in [0, 1), budgets ≥ 0,
// audit_rate in [0, 1]. The message names the offending field.
absl::Status ValidateGatePolicy(const GatePolicy& policy);

// δ_loc = δ_req / (L · Hq · T) (certificates.md §2).
double LocalDelta(double delta_req, int32_t num_layers, int32_t num_q_heads, int64_t max_steps);

class PolicyHolder {
 public:
  explicit PolicyHolder(GatePolicy initial)
      : policy_(std::make_shared<const GatePolicy>(initial)) {}
  std::shared_ptr<const GatePolicy> Get() const {
    absl::MutexLock lock(&mu_);
    return policy_;
  }
  void Set(GatePolicy next) {
    auto p = std::make_shared<const GatePolicy>(next);
    absl::MutexLock lock(&mu_);
    policy_.swap(p);
  }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const GatePolicy> policy_;
};

}  // namespace witcert
