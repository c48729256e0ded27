// Metered decode attention for one (layer, query head, step) on plain arrays: the CPU
// reference every GPU kernel is tested against.
//
// Math (certificates.md): ℓ̂_t = q·k̃_t/√d, p̂ = softmax(ℓ̂), õ = Σ p̂_t ṽ_t, and next to it
// the certificate: ε̂_t = min(ε_t (Tier A band witness), u_t (Tier B dither scale)),
// A − 1 = Σ p̂_t(e^{ε̂_t} − 1), TV ≤ min(1, (A²−1)/2, tanh(ε̂_max/2)),
// ‖o − õ‖ ≤ 2·TV·max_t ν_t + Σ p̂_t ρ_t (ρ_t ≥ ‖v_t − ṽ_t‖, ν_t ≥ ‖ṽ_t‖ + ρ_t). The context
// is cut into `num_splits` contiguous splits, each reduced on its own (two passes: max, then
// sums) and merged by log-sum-exp exactly as a flash-decoding kernel does; all bound
// arithmetic lives in kernels/meter/cert_math.h, shared with CUDA.
#pragma once

#include <cstdint>

#include "kernels/meter/cert_math.h"
#include "kernels/meter/tier_b_form.h"

namespace witcert {

// One KV head's context, decoded to fp32 rows. Optional arrays may be null.
struct MeteredHeadInputs {
  int32_t head_dim = 0;             // d; even
  int32_t num_bands = 8;            // B; (d/2) % B == 0
  bool interleaved = true;          // RoPE pairing of the model (band layout)
  int64_t num_tokens = 0;           // S
  const float* k = nullptr;         // [S, d] stored keys k̃ (decode(encode(k)))
  const float* v = nullptr;         // [S, d] stored values ṽ
  const float* k_witness = nullptr; // [S, B] key band bounds c_b·U (null: keys exact)
  // Value summary [S] each (null: values exact): ρ_t ≥ ‖v_t − ṽ_t‖ and ν_t ≥ ‖ṽ_t‖ + ρ_t
  // (engine/kv/witness.h). Not read on token_exact rows: ρ = 0 there, and ν is the row's norm.
  const float* v_rho = nullptr;
  const float* v_bound = nullptr;
  const float* k_dither_scale = nullptr;  // [S] Tier B dither scale s_t (null: no Tier B)
  const uint8_t* token_exact = nullptr;   // [S] 1: row is an exact copy (ε̂ = 0, ρ = 0)
  // [S] optional StoredValueNorm(ṽ_t) of the rows without a summary (values exact, or
  // token_exact rows): the query heads of a GQA group share their values, so the caller
  // computes these once; null → computed here. Other rows' entries are not read.
  const float* v_norm = nullptr;
};

// ‖ṽ_t‖ as the meter uses it: the fp32 scaled norm, inflated to cover its rounding.
float StoredValueNorm(const float* v, int32_t head_dim);

struct MeteredAttentionOptions {
  int32_t num_splits = 1;  // ≥ 1; clipped to S
  bool meter = true;       // false: plain attention, no certificate
  double delta_loc = 0.0;  // Tier B failure probability per cell; 0 disables Tier B
  // Where Tier B applies, how ε̂ takes u_t (meter::TierBForm): per-token min(ε_t, u_t); u_t alone
  // (scale-only: no Tier A witness); or u_t alone with a split's A − 1 and value sums from its
  // largest u_t and ρ_t (split-max, meter::SetSplitMaxSums), the form the tensor-core int8-dither
  // kernel computes at almost no cost a token.
  meter::TierBForm tier_b_form = meter::TierBForm::kPerToken;
  // > 0: splits of this many tokens from the start (the last one shorter), as the CUDA kernels
  // cut them (SplitTokens), instead of num_splits even cuts. Split-max bounds depend on the cut.
  int64_t split_tokens = 0;
  // false: the certificate sums token by token (the scalar path, which the eight-lane one
  // must agree with; tests compare them). The output is the same either way.
  bool vector_sums = true;
};

struct MeteredAttentionResult {
  meter::CertBound bound;
  bool tier_b = false;     // u_t was available (Tier B scales present and δ_loc > 0)
  float out_norm = 0.0f;   // ‖õ‖
};

// out [d] = õ; `result` gets the certificate. `token_risk` [S] (optional) receives
// p̂_t·(e^{ε̂_t} − 1), each token's share of A − 1 (the gate's risk ranking).
void MeteredAttention(const MeteredHeadInputs& in, const float* q,
                      const MeteredAttentionOptions& options, float* out,
                      MeteredAttentionResult* result, float* token_risk = nullptr);

// Per-cell constants derived from the query, shared by every split.
struct MeteredQuery {
  const float* q = nullptr;  // [d]
  float q_band_norm[64] = {};// [B] (B ≤ 64)
  float inv_sqrt_d = 0.0f;
  float eps_inflation = 1.0f;
  float eta_factor = 0.0f;
  float tier_b_coef = 0.0f;  // u_t = coef · s_t; 0 → no Tier B
};
MeteredQuery PrepareMeteredQuery(const MeteredHeadInputs& in, const float* q,
                                 const MeteredAttentionOptions& options);

// One split [begin, end): partial sums plus the unnormalised output accumulator
// acc [d] = Σ e^{ℓ̂_t − m}·ṽ_t. `logit`/`eps` [end−begin] (optional) receive ℓ̂_t and ε̂_t.
void MeteredSplit(const MeteredHeadInputs& in, const MeteredQuery& mq, const MeteredAttentionOptions& options,
                  int64_t begin, int64_t end, meter::CertPartial* partial, float* acc,
                  float* logit = nullptr, float* eps = nullptr);

}  // namespace witcert
