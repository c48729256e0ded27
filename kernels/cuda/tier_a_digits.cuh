// Tier A's ε = Σ_b f_b·c_b·U in integer arithmetic, for the tensor-core decode's per-token step
// (metered_decode_int8_mma.cuh): the query head's band factors f_b = ‖q_b‖/√d·EpsInflation as
// 16-bit digits rounded up, dp2a against the token's 8-bit band codes c_b (kernels/meter/
// witness_format.h), then one conversion and two products, each rounded up. Every step is exact
// or rounds up, so the result is ≥ Σ_b f_b·c_b·U exactly; the rounding of the factors themselves
// is EpsInflation's (cert_math.h). Tested against that sum in fp64 (tier_a_digits_test).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/ops/mma_f16.cuh"

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

// The tensor-core form of these sums splits each 16-bit digit q' = 32·hi + lo (hi ≤ 2047, lo ≤ 31,
// both exact fp16 integers). This is bands 2t, 2t + 1 of one head's packed digits d (as
// BandFactorDigits8 packs them: band 2t in the low half, 2t + 1 in the high), their hi parts
// (d >> 5) where !lo, else their lo parts (d & 31), as an fp16 pair (the integers are exact in
// fp32 and in fp16): an mma.m16n8k8 fragment register.
__device__ __forceinline__ uint32_t BandDigitPartPair(uint32_t d, bool lo) {
  const uint32_t b0 = d & 0xffffu, b1 = d >> 16;
  return mma::PackHalf2(static_cast<float>(lo ? b0 & 31u : b0 >> 5), static_cast<float>(lo ? b1 & 31u : b1 >> 5));
}

// The same sums Σ_b q'_b·c_b for 16 query rows × 8 tokens on the tensor cores (the prefill kernels,
// whose warps hold 16 rows): the digits split as BandDigitPartPair does, two mma.m16n8k8 with fp32
// accumulation against the codes (≤ 255, exact), then fl↑(32·Σhi·c + Σlo·c). Every product and
// partial sum is an integer below 8·2047·255 < 2^22, so the tensor cores' accumulation (whatever
// its order and alignment: a 24-bit significand resolves every integer below 2^24) is exact, and
// the one rounding up gives __uint2float_ru of the dp2a form's exact integer: TierAEpsilonOfDigits's
// value bit for bit once ·U and ·s_q follow (tested).
//
// A fragments (m16n8k8, g = lane / 4, t = lane % 4): register 0 row g, 1 row g + 8, each the fp16
// pair of bands 2t, 2t + 1.
struct BandDigitFragments {
  uint32_t hi[2], lo[2];
  // rows[r]: the digits of row g + 8r as BandFactorDigits8 packs them (bands 2j, 2j+1 in q[j]).
  __device__ __forceinline__ void From(const uint32_t (&row0)[4], const uint32_t (&row1)[4], int t) {
    uint32_t d[2] = {row0[0], row1[0]};  // bands 2t (low half), 2t + 1 (high half); selects, not
#pragma unroll                               // a dynamic index (which would put q in local memory)
    for (int j = 1; j < 4; ++j) {
      d[0] = t == j ? row0[j] : d[0];
      d[1] = t == j ? row1[j] : d[1];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      hi[r] = BandDigitPartPair(d[r], false);
      lo[r] = BandDigitPartPair(d[r], true);
    }
  }
};

// Two 8-bit band codes (low byte: band 2t, next: band 2t + 1, as a 16-bit load of a token's codes
// at byte 2t) as an exact fp16 pair: 0x64nn is 1024 + nn, less 1024.
__device__ __forceinline__ uint32_t BandCodePairToF16x2(uint32_t two_codes) {
  const uint32_t biased = __byte_perm(two_codes, 0x64646464u, 0x4140u);
  const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&biased), __half2half2(__ushort_as_half(0x6400u)));
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Σ_b q'_b·c_b of rows g, g + 8 (sum[0, 1], sum[2, 3]) and tokens of columns 2t, 2t + 1 (the C
// fragment's layout), rounded up to fp32. codes: B fragment, this lane's column g token's bands
// 2t, 2t + 1 (BandCodePairToF16x2). ε is then __fmul_ru(__fmul_ru(sum, U), s_q), as in
// TierAEpsilonOfDigits.
__device__ __forceinline__ void TierABandSumsMma(const BandDigitFragments& q, uint32_t codes, float (&sum)[4]) {
  float h[4] = {0.0f, 0.0f, 0.0f, 0.0f}, l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma::MmaF16F32K8(h, q.hi[0], q.hi[1], codes);
  mma::MmaF16F32K8(l, q.lo[0], q.lo[1], codes);
#pragma unroll
  for (int e = 0; e < 4; ++e) sum[e] = __fmaf_ru(h[e], 32.0f, l[e]);
}

}  // namespace witcert::cuda_kv
