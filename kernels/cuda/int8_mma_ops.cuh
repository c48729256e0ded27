// The int8 tensor-core building blocks the decode and chunked-prefill kernels share: the exact
// s8·s8→s32 MMA, a 4×4 byte transpose, and the query's split into base-128 int8 digits
// (kernels/meter/int_digit_dot.h) with the scalars its logits and η need.
#pragma once

#include <cstdint>

#include "kernels/meter/int_digit_dot.h"

namespace witcert::cuda_kv {

// D += A·B, m16n8k32, int8 inputs, int32 accumulators (exact).
__device__ __forceinline__ void MmaS8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Transposes 4×4 bytes: o[b] = {t0.byte b, t1.byte b, t2.byte b, t3.byte b}.
__device__ __forceinline__ void Transpose4x4(uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3, uint32_t (&o)[4]) {
  const uint32_t lo01 = __byte_perm(t0, t1, 0x5140), hi01 = __byte_perm(t0, t1, 0x7362);
  const uint32_t lo23 = __byte_perm(t2, t3, 0x5140), hi23 = __byte_perm(t2, t3, 0x7362);
  o[0] = __byte_perm(lo01, lo23, 0x5410);
  o[1] = __byte_perm(lo01, lo23, 0x7632);
  o[2] = __byte_perm(hi01, hi23, 0x5410);
  o[3] = __byte_perm(hi01, hi23, 0x7632);
}

// One query vector's digit split (a warp; lane holds channels 4·lane..4·lane+3 of qg): the
// four base-128 digits of each channel go to digits[j·digit_stride + channel], and the
// scalars the logits and η need come back (every lane gets them). Shared by the tensor-core
// decode and chunked-prefill kernels, so both compute the very logits IntDigitEta bounds.
// *k = the digit exponent of a query with max|q| = amax > 0, finite (2^{k−1} ≤ amax < 2^k);
// false when k is outside [kDigitExpMin, kDigitExpMax] (SplitQueryDigits marks such a query bad).
__device__ __forceinline__ bool DigitExponentInRange(float amax, int32_t* k) {
  *k = meter::DigitExponent(amax);
  return *k >= meter::kDigitExpMin && *k <= meter::kDigitExpMax;
}

struct QueryDigitScalars {
  double q1 = 0.0;      // ‖q‖₁
  int32_t exp = 0;      // k with 2^{k−1} ≤ max|q| < 2^k
  bool bad = false;     // not finite, or k outside [kDigitExpMin, kDigitExpMax]
  float qscale = 0.0f;  // 2^{k−6}·fl(1/√d), 0 for a zero or bad query
};
__device__ __forceinline__ QueryDigitScalars SplitQueryDigits(const float (&qv)[4], int lane, float inv_sqrt_d,
                                                              int8_t* digits, int digit_stride) {
  float amax = 0.0f;
  double a1 = 0.0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    amax = fmaxf(amax, fabsf(qv[i]));
    if (!(fabsf(qv[i]) <= 3.0e38f)) amax = INFINITY;  // NaN or inf
    a1 += fabs(static_cast<double>(qv[i]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    a1 += __shfl_xor_sync(0xffffffffu, a1, o);
  }
  QueryDigitScalars r;
  r.q1 = a1;
  r.bad = !(amax <= 3.0e38f);
  if (!r.bad && amax > 0.0f) r.bad = !DigitExponentInRange(amax, &r.exp);
  const double sc = (!r.bad && amax > 0.0f) ? ldexp(1.0, 6 - r.exp) : 0.0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int8_t dg[4];
    meter::SplitIntoDigits(sc == 0.0 ? 0.0 : static_cast<double>(qv[i]) * sc, dg);
#pragma unroll
    for (int j = 0; j < 4; ++j) digits[j * digit_stride + lane * 4 + i] = dg[j];
  }
  r.qscale = amax > 0.0f && !r.bad ? meter::DigitQueryScale(r.exp, inv_sqrt_d) : 0.0f;
  return r;
}
// Lane l's channels 4l..4l+3 of qg (zeros when not live), as SplitQueryDigits takes them.
__device__ __forceinline__ void LoadQueryLane(const float* qg, bool live, int lane, float (&qv)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) qv[i] = live ? qg[lane * 4 + i] : 0.0f;
}
__device__ __forceinline__ QueryDigitScalars SplitQueryDigits(const float* qg, bool live, int lane,
                                                              float inv_sqrt_d, int8_t* digits,
                                                              int digit_stride) {
  float qv[4];
  LoadQueryLane(qg, live, lane, qv);
  return SplitQueryDigits(qv, lane, inv_sqrt_d, digits, digit_stride);
}

}  // namespace witcert::cuda_kv
