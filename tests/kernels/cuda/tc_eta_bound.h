// An over-estimate of the η that the tensor-core logits (kernels/cuda/tc_logit_eta.cuh: fp16 / bf16 /
// fp8-e4m3 keys at d = 128, two query digits) can carry for one (query, context) cell, in double,
// for the upper tolerances of the GPU-vs-CPU certificate comparisons (the decode and the
// chunked-prefill tests). Never used for soundness: those tests check against the truth.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/tc_logit_eta.cuh"

namespace witcert::testing {

// How scaled fp8's η is formed: not scaled, the codes' range (TcLogitEtaFp8CodeBoundOf: T_t·s_t ≤
// 448·‖q‖₁·max_t s_t, the decode kernel), or per token (TcLogitEtaScaledOf over max_t T̂_t·s_t, the
// chunked-prefill kernel).
enum class ScaledEta { kNone, kCodeBound, kPerToken };

// T̂ ≤ (1 + 2^-10)²·Σ_c |q_c·2^s|·|k̃_c| + the digits' rounding (the 1.01). Scaled fp8: the absolute
// term is per unit of the token's K scale, which is ≤ max_c |k̃_c| / 256 (its codes' largest magnitude
// is ~448). Tokens with exact[t] (read exact, no tensor-core logit) are left out.
inline double TensorCoreEtaBound(const float* q, const std::vector<float>& k, const std::vector<uint8_t>& exact,
                                 int64_t S, int32_t d, bool bf16, ScaledEta scaled = ScaledEta::kNone) {
  const bool has_scale = scaled != ScaledEta::kNone;
  double per_token = 0.0, qmax = 0.0, scale_max = has_scale ? 0.0 : 1.0;
  for (int32_t c = 0; c < d; ++c) qmax = std::max(qmax, std::fabs(static_cast<double>(q[c])));
  for (int64_t t = 0; t < S; ++t) {
    if (!exact.empty() && exact[t]) continue;
    double s = 0.0, kmax = 0.0;
    for (int32_t c = 0; c < d; ++c) {
      s += std::fabs(static_cast<double>(q[c]) * k[t * d + c]);
      kmax = std::max(kmax, std::fabs(static_cast<double>(k[t * d + c])));
    }
    per_token = std::max(per_token, s);
    if (has_scale) scale_max = std::max(scale_max, kmax / 256.0);
  }
  if (scaled == ScaledEta::kCodeBound) {
    double q_l1 = 0.0;
    for (int32_t c = 0; c < d; ++c) q_l1 += std::fabs(static_cast<double>(q[c]));
    per_token = 448.0 * q_l1 * scale_max;
  }
  const double rel = bf16 ? cuda_kv::TcLogitEta<true>::kRel : cuda_kv::TcLogitEta<false>::kRel;
  const double abs = bf16 ? cuda_kv::TcLogitEta<true>::kAbs : cuda_kv::TcLogitEta<false>::kAbs;
  // unscale = 2^-s/√d with 2^-s ≤ max|q|·2^-13.
  return (rel * 1.01 * per_token + abs * scale_max * qmax * std::ldexp(1.0, -13)) / std::sqrt(static_cast<double>(d));
}

// The same for kivi2's tensor-core logits (d = 128: the pipelined decode kernel, the chunked-prefill
// kernel; TcLogitEtaKivi2Of): η ≤
// (c_rel·Σ_c (|hi_c| + |lo_c|)·(Z + 3S) + c_abs·2^-s)/√d with Z + 3S, a channel pair's largest
// |z| + 3|s| over the blocks read, ≤ 3·max|k̃| (z is a stored key's value, 3s ≈ max − z) — taken
// with room as 3.1·max_t,c |k̃_t,c| over the head's rows.
inline double Kivi2TensorCoreEtaBound(const float* q, const std::vector<float>& k, int64_t S, int32_t d) {
  double q_l1 = 0.0, qmax = 0.0, kmax = 0.0;
  for (int32_t c = 0; c < d; ++c) {
    q_l1 += std::fabs(static_cast<double>(q[c]));
    qmax = std::max(qmax, std::fabs(static_cast<double>(q[c])));
  }
  for (int64_t i = 0; i < S * d; ++i) kmax = std::max(kmax, std::fabs(static_cast<double>(k[i])));
  return (cuda_kv::TcLogitEtaKivi2::kRel * 1.01 * q_l1 * 3.1 * kmax +
          cuda_kv::TcLogitEtaKivi2::kAbs * qmax * std::ldexp(1.0, -13)) /
         std::sqrt(static_cast<double>(d));
}

}  // namespace witcert::testing
