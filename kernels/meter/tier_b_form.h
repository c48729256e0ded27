// Tier B's forms (certificates.md §3): how an int8-dither cell with δ_loc > 0 turns the scale
// bound u_t = C·s_t into ε̂_t and the split's sums. One enum for the gate's policy, the CPU
// reference and the CUDA kernels. Ordered tightest first: a larger value's bound is never
// below a smaller one's on the same cuts.
#pragma once

#include <cstdint>

namespace witcert::meter {

enum class TierBForm : uint8_t {
  kPerToken = 0,   // ε̂_t = min(ε_t, u_t): Tier A's key witness and u_t, token by token
  kScaleOnly = 1,  // ε̂_t = u_t, token by token: no key witness read
  kSplitMax = 2,   // ε̂_t = u_t, a split's A − 1 and value sums from its largest u_t and ρ_t
};

// Every form, tightest first (for parsing names and for sweeps).
constexpr TierBForm kTierBForms[] = {TierBForm::kPerToken, TierBForm::kScaleOnly, TierBForm::kSplitMax};

// Whether the form reads Tier A's key witness where Tier B applies.
constexpr bool TierBFormReadsKeyWitness(TierBForm form) { return form == TierBForm::kPerToken; }

// "per-token", "scale-only", "split-max": the names of the config's gate.tier_b_form.
constexpr const char* TierBFormName(TierBForm form) {
  return form == TierBForm::kSplitMax ? "split-max" : (form == TierBForm::kScaleOnly ? "scale-only" : "per-token");
}

}  // namespace witcert::meter
