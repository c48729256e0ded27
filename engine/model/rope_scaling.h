// RoPE frequency scaling as per-pair factors (ModelConfig::rope_freq_factors): pair i of a head
// of dimension d rotates by pos·θ^(−2i/d) / f_i, llama.cpp's convention for its `rope_freqs`
// tensor. The scalings checkpoints declare map onto it:
//  * linear (HF rope_scaling "linear", GGUF rope.scaling.type "linear"): positions divided by
//    `factor`, i.e. f_i = factor for every pair;
//  * llama3 (Llama 3.1 and later, HF rope_scaling "llama3"): with wavelength λ_i = 2π/θ^(−2i/d),
//    pairs with λ_i < L/high_freq_factor keep their frequency (f_i = 1), pairs with
//    λ_i > L/low_freq_factor are slowed by `factor`, and between them
//    s = (L/λ_i − low_freq_factor)/(high_freq_factor − low_freq_factor) blends the two:
//    θ_i' = (1 − s)·θ_i/factor + s·θ_i, i.e. f_i = 1/((1 − s)/factor + s), where L is
//    original_max_position_embeddings (transformers' _compute_llama3_parameters);
//  * GGUF's rope_freqs tensor: f_i as stored (Llama 3.1+ GGUFs carry the llama3 factors there);
//  * yarn (HF rope_scaling "yarn", GGUF rope.scaling.type "yarn"; Qwen2.5 / Qwen3 beyond their
//    native window): with r_i = L/λ_i the turns pair i makes over the original window L, pairs
//    turning more than beta_fast times keep their frequency, pairs turning fewer than
//    beta_slow times are slowed by `factor`, and a linear ramp in the pair index blends the two
//    between the pair indices where r = beta_fast and r = beta_slow (rounded outwards unless
//    truncate is false): with e_i the kept share (1 at the fast end, 0 at the slow end, times
//    the extrapolation factor), θ_i' = (1 − e_i)·θ_i/factor + e_i·θ_i, f_i = 1/((1 − e_i)/factor + e_i).
//    YaRN also scales every cos and sin by an attention factor (ModelConfig::rope_attn_factor;
//    by default 1 + 0.1·ln(factor)), which the rotation applies with the frequencies. The same
//    formulas as transformers' _compute_yarn_parameters and ggml's rope_yarn.
// Scalings that change more than these (dynamic NTK's length-dependent θ, longrope's two factor
// sets) are refused by the loaders, not approximated.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace witcert {

struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 8192.0;  // original_max_position_embeddings
};

// The llama3 factors [head_dim / 2] for base θ. InvalidArgument unless factor ≥ 1,
// 0 < low_freq_factor < high_freq_factor and original_context > 0 (all finite).
absl::Status Llama3RopeFactors(const Llama3RopeScaling& s, double theta, int32_t head_dim,
                               std::vector<float>* factors);

struct YarnRopeScaling {
  double factor = 4.0;
  double original_context = 32768.0;  // L: original_max_position_embeddings
  double beta_fast = 32.0;            // turns over L above which a pair keeps its frequency
  double beta_slow = 1.0;             // turns over L below which a pair is slowed by `factor`
  double extrapolation = 1.0;         // scales the kept share e_i (GGUF yarn_ext_factor; HF: 1)
  bool truncate = true;               // ramp ends rounded outwards to whole pair indices
};

// The yarn factors [head_dim / 2] for base θ. InvalidArgument unless factor ≥ 1,
// original_context > 0, beta_fast > beta_slow > 0 and 0 ≤ extrapolation ≤ 1 (all finite).
absl::Status YarnRopeFactors(const YarnRopeScaling& s, double theta, int32_t head_dim,
                             std::vector<float>* factors);

// YaRN's default attention factor: 0.1·mscale·ln(factor) + 1 for factor > 1, else 1 (with
// mscale 1 unless the checkpoint gives one, as DeepSeek's do).
double YarnAttentionFactor(double factor, double mscale = 1.0);

// The context a yarn scaling was made for: original_context × factor, never below `context`
// (the declared window), at most INT32_MAX; what vLLM derives its max_model_len from.
int32_t YarnContextLength(const YarnRopeScaling& s, int32_t context);

// factor for every pair [head_dim / 2]; InvalidArgument unless factor is finite and ≥ 1.
absl::Status LinearRopeFactors(double factor, int32_t head_dim, std::vector<float>* factors);

// Clears `factors` when every one is 1 and attn_factor is 1: a declared scaling that changes
// nothing (linear factor 1, yarn factor 1) leaves the model unscaled.
void DropIdentityRopeScaling(float attn_factor, std::vector<float>* factors);

// Empty, or head_dim / 2 finite positive factors; and a finite positive attention factor.
absl::Status ValidateRopeFactors(absl::Span<const float> factors, int32_t head_dim);
absl::Status ValidateRopeAttnFactor(float attn_factor);

}  // namespace witcert
