// The AVX2 row tile shared by the 32-value block formats without a tuned kernel (Q5_0, Q5_1,
// IQ4_NL; matmul_dot_q5.cc, matmul_dot_iq4.cc) against Q8_1Row activations. Per block, F::Prepare
// unpacks the weights once for the NX activation rows and F::Lanes gives the 8 int32 lanes of
// Σ q_w·q_x with one row's 32 int8 values; they are scaled by d_w·d_x into the row's accumulator.
// Where F::kHasMin, F::MinTerm(block)·s_x (the Q8_1Row's d_x·Σ q_x) is added apart.
#pragma once

#include <cmath>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

#ifdef WITCERT_MATMUL_AVX2
namespace witcert::matmul_internal {

template <class F, int NX>
struct Block32Avx2 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    using Block = typename F::Block;
    const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 32]
    Q8_1Row xr[NX];
    __m256 acc[NX];
    float min_acc[NX];
    for (int j = 0; j < NX; ++j) {
      xr[j] = ViewQ8_1Row(x + j * stride, cols);
      acc[j] = _mm256_setzero_ps();
      min_acc[j] = 0.0f;
    }
    for (int64_t b = 0; b < cols / kQk; ++b) {
      const __m256i u = F::Prepare(w[b]);
      const float d = F16ToF32(w[b].d), m = F::kHasMin ? F::MinTerm(w[b]) : 0.0f;
      for (int j = 0; j < NX; ++j) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[j].qs + b * kQk));
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * xr[j].d[b]), _mm256_cvtepi32_ps(F::Lanes(u, xv)), acc[j]);
        if constexpr (F::kHasMin) min_acc[j] = std::fma(m, xr[j].s[b], min_acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j] = F::kHasMin ? HSum(acc[j]) + min_acc[j] : HSum(acc[j]);
  }
};

}  // namespace witcert::matmul_internal
#endif
