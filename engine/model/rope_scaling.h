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
//  * GGUF's rope_freqs tensor: f_i as stored (Llama 3.1+ GGUFs carry the llama3 factors there).
// Scalings that change more than the frequencies (yarn's attention factor, dynamic NTK's
// length-dependent θ, longrope) are refused by the loaders, not approximated.
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

// factor for every pair [head_dim / 2]; InvalidArgument unless factor is finite and ≥ 1.
absl::Status LinearRopeFactors(double factor, int32_t head_dim, std::vector<float>* factors);

// Empty, or head_dim / 2 finite positive factors.
absl::Status ValidateRopeFactors(absl::Span<const float> factors, int32_t head_dim);

}  // namespace witcert
