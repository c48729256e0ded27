// RoPE's frequencies as the CUDA rotation kernels take them: base θ, optional per-pair divisors
// (RoPE scaling: llama3 / linear / yarn, engine/model/rope_scaling.h) and a factor on every cos
// and sin (yarn's attention factor). Pair p of a head of dimension d at position pos turns by
// pos·θ^(−2p/d) / factors[p], and (cos, sin) are scaled by attn_factor: the CPU backend's
// RopeCosSin (kernels/cpu/transformer_ops.h), evaluated the same way in double.
//
// Implicit from a float θ, so unscaled callers read as before and keep their bits.
#pragma once

#include "kernels/meter/hd.h"

namespace witcert::cuda_ops {

struct RopeFreq {
  float theta = 10000.0f;
  const float* factors = nullptr;  // [d/2] device memory, or null: no divisors
  float attn_factor = 1.0f;

  WITCERT_HD RopeFreq(float theta_in = 10000.0f, const float* factors_in = nullptr,  // NOLINT: implicit
                      float attn_factor_in = 1.0f)
      : theta(theta_in), factors(factors_in), attn_factor(attn_factor_in) {}
};

}  // namespace witcert::cuda_ops
