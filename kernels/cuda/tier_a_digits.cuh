// Tier A's ε = Σ_b f_b·c_b·U in integer arithmetic, for the tensor-core decode's per-token step
// (metered_decode_int8_mma.cuh): the query head's band factors f_b = ‖q_b‖/√d·EpsInflation as
// 16-bit digits rounded up, dp2a against the token's 8-bit band codes c_b (kernels/meter/
// witness_format.h), then one conversion and two products, each rounded up. Every step is exact
// or rounds up, so the result is ≥ Σ_b f_b·c_b·U exactly; the rounding of the factors themselves
// is EpsInflation's (cert_math.h). Tested against that sum in fp64 (tier_a_digits_test).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace witcert::cuda_kv {

// Tier A's band factor f_b = ‖q_b‖/√d·EpsInflation of one query head as a 16-bit digit
// q'_b = ⌈f_b / s_q⌉ ≥ f_b / s_q, with s_q the head's power of two that puts its largest factor
// in [2^15, 2^16), or 2^-149 (the least fp32) below 2^-134: every q'_b ≤ 65535, and each exceeds
// f_b / s_q by < 1, i.e. by < 2^-15 of the largest factor (for factors below 2^-134, by < 2^-149
// absolute). Called by the nb lanes g·nb + b of a warp that hold head g's factors (a shuffle
// group of nb lanes, nb a power of two ≤ 32). A head whose factors are all 0 gets digits 0
// (ε = 0, as 0·c_b); one with a NaN or ∞ factor gets digits 1 and s_q = NaN or ∞, so its ε is
// NaN, or ∞ (NaN where Σ c_b·U = 0), as the products f_b·c_b gave it.
struct BandFactorDigits {
  uint32_t digit;
  float scale;
};
// Factor f's digit given its head's largest factor fmax and whether any of them is NaN: the part
// BandFactorDigitsOf and BandFactorDigits8 share.
__device__ __forceinline__ BandFactorDigits BandFactorDigitAtMax(float f, float fmax, bool nan) {
  if (nan) return {1u, __int_as_float(0x7fc00000)};  // NaN, as NaN·c_b gave it
  if (!(fmax <= 3.4028234663852886e38f)) return {1u, fmax};  // ∞
  if (!(fmax > 0.0f)) return {0u, 1.0f};
  int e = max(ilogbf(fmax) - 15, -149);  // fmax / 2^e ∈ [2^15, 2^16), or < 2^15
  if (ceilf(scalbnf(fmax, -e)) > 65535.0f) ++e;
  return {static_cast<uint32_t>(ceilf(scalbnf(f, -e))), scalbnf(1.0f, e)};  // scalbnf: exact here
}
__device__ __forceinline__ BandFactorDigits BandFactorDigitsOf(float f, int nb) {
  float fmax = f, nan = f == f ? 0.0f : 1.0f;  // fmaxf drops a NaN: flag it apart
  for (int o = 1; o < nb; o <<= 1) {
    fmax = fmaxf(fmax, __shfl_xor_sync(0xffffffffu, fmax, o));
    nan = fmaxf(nan, __shfl_xor_sync(0xffffffffu, nan, o));
  }
  return BandFactorDigitAtMax(f, fmax, nan > 0.0f);
}

// The same digits of one head from the 8 factors one thread holds (no shuffles), packed as
// TierAEpsilonOfDigits takes them (bands 2j, 2j+1 in the low, high half of q[j]).
__device__ __forceinline__ void BandFactorDigits8(const float (&f)[8], uint32_t (&q)[4], float* scale) {
  float fmax = 0.0f;
  bool nan = false;
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    fmax = fmaxf(fmax, f[b]);
    nan = nan || !(f[b] == f[b]);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const BandFactorDigits lo = BandFactorDigitAtMax(f[2 * j], fmax, nan);
    const BandFactorDigits hi = BandFactorDigitAtMax(f[2 * j + 1], fmax, nan);
    q[j] = lo.digit | (hi.digit << 16);
    if (j == 0) *scale = lo.scale;
  }
}

// Head g's digits as TierAEpsilonOfDigits takes them (bands 2j, 2j+1 in the low, high half of
// q[j], j < 4) and their scale, stored by the B = 8 lanes g·8 + b that computed them by
// BandFactorDigitsOf (every lane of the warp calls: the pairs meet by a shuffle).
__device__ __forceinline__ void StoreBandFactorDigits(const BandFactorDigits& d, int b, uint32_t* q, float* scale) {
  const uint32_t partner = __shfl_down_sync(0xffffffffu, d.digit, 1);  // band b + 1's
  if (b % 2 == 0) q[b / 2] = d.digit | (partner << 16);
  if (b == 0) *scale = d.scale;
}

// ε of one token for one head from its band codes (bytes of kc, band b at byte b % 4 of word
// b / 4), unit U and the head's digits q [4] (bands 2j, 2j+1 in the low, high half of q[j]) and
// their scale s_q: Σ q'_b·c_b < 8·2^16·2^8 exactly, then ⌈·⌉ to fp32, ·U and ·s_q rounded up.
__device__ __forceinline__ float TierAEpsilonOfDigits(const uint32_t (&q)[4], uint2 kc, float unit, float scale) {
  // Two chains of two (exact integers: the same sum as one chain of four, one step shorter).
  const uint32_t lo = __dp2a_hi(q[1], kc.x, __dp2a_lo(q[0], kc.x, 0u));
  const uint32_t hi = __dp2a_hi(q[3], kc.y, __dp2a_lo(q[2], kc.y, 0u));
  return __fmul_ru(__fmul_ru(__uint2float_ru(lo + hi), unit), scale);
}

}  // namespace witcert::cuda_kv
