// kivi2's logits on tensor cores: the pipelined decode kernel's K pass at d = 128
// (metered_decode_pipelined.cuh, kTcK2), one warp's 8 tokens of a stage against the query's fp16
// digits (pipe_tc_query.cuh, fp8's channel mapping: Tc8KeyChannel). The keys are never decoded:
// with k̃_c = fl(z_c + s_c·m_c) and m_c = b0_c + 2·b1_c, each k-step's A fragment is
//   rows gid (token 8w + gid):  s_c·b0_c   — s_c where the code's low bit is set, else 0,
//   rows gid + 8 (same token): s_c·b1_c   — the high bit,
// both exact fp16 (a PRMT mask over the block's s pair, ByteSignHalfMasks), so one MMA takes both
// planes and the token's sum is row gid + 2·row gid + 8 (two chains, even and odd k-steps: 4 MMAs
// each). The zero term Σ d_c·z_c (the block's, the same on every row) is a second MMA a k-step with
// z in rows gid, into a chain of its own (8 MMAs; its rows gid + 8 hold the scales, unused). Costs
// per lane and k-step: one 16-byte load of the block's parameters (two channel pairs' zeros and
// scales, KeyGroupWord's layout), four mask PRMTs and four ANDs for the planes, and 2 MMAs per 4
// heads; the codes' 7 shifts a word.
//
// The meter's share (η, tc_logit_eta.cuh: TcLogitEtaKivi2Of; certificates.md) is no MMA: η needs
// W = Σ_c (|hi_c| + |lo_c|)·(|z_c| + 3|s_c|) bounded above: with Z(c), S(c) the largest |z|, |s| of
// channels c and c ^ 2 over every block the warp read, W ≤ Σ_c (|hi_c| + |lo_c|)·(Z(c) + 3·S(c)).
// Lane l keeps channels 4l..4l+3's (one 16-byte load of parameters: Kivi2TcParamMax, once a block:
// four ANDs, four f16x2 maxima); the sum is formed once a split (Kivi2TcBoundSum). Outlier channels
// raise only their own pair's terms.
#pragma once

#include <cstdint>

#include "kernels/cuda/f16_digits.cuh"
#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/tc8_layout.h"
#include "kernels/cuda/tc_logit_eta.cuh"

namespace witcert::cuda_kv {

// The lane's B fragment of n-tile n, k-step ks: from registers, or (QB_SHARED) from shared memory
// [n-tile][k-step][lane].
template <int NTK, bool QB_SHARED>
__device__ __forceinline__ uint2 Kivi2QueryB(const uint32_t (&qb)[NTK][8][2], const uint2* qbs, int n, int ks,
                                             int lane) {
  if constexpr (QB_SHARED) {
    return qbs[(n * 8 + ks) * 32 + lane];
  } else {
    return make_uint2(qb[n][ks][0], qb[n][ks][1]);
  }
}

// codes: the lane's token's 32 code bytes (row gid of the warp's tile; channel c's code at bits
// 2·(c % 4) of byte c / 4); params: the token's block's 256 parameter words (KeyGroupWord's
// layout: 32-bit word c holds channel pair c / 2's zeros (c even) or scales), 16-byte aligned;
// qb: the query's B fragments [n-tile][k-step][register], or with QB_SHARED qbs, the same in shared
// memory [n-tile][k-step][lane] (with the meter). Out: dot[n], the token's Σ d_c·k_c for head
// 4n + tig before the unscale (Kivi2TcDot).
template <int NTK, bool QB_SHARED>
__device__ __forceinline__ void Kivi2TcKeyTile(const uint8_t* codes, const uint8_t* params, int lane,
                                               const uint32_t (&qb)[NTK][8][2], const uint2* qbs, float (&dot)[NTK]) {
  const int tig = lane & 3;
  const uint32_t* row = reinterpret_cast<const uint32_t*>(codes);
  const uint32_t words[2] = {row[tig], row[tig + 4]};  // k-steps 0-3, 4-7 (Tc8KeyChannel)
  float ca[NTK][4], cb[NTK][4], cz[NTK][4];  // the planes' chains (even, odd k-steps), the zeros' chain
#pragma unroll
  for (int n = 0; n < NTK; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) ca[n][i] = cb[n][i] = cz[n][i] = 0.0f;
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // Code bit 8j + b of w at bit 8j + 7 of w << (7 − b): channel 4j + i's low bit is b = 2i, its
    // high bit 2i + 1.
    const uint32_t w = words[half];
    const uint32_t w1 = w << 1, w2 = w << 2, w3 = w << 3, w4 = w << 4, w5 = w << 5, w6 = w << 6, w7 = w << 7;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int ks = 4 * half + j;
      // Channels c..c + 3 (c = Tc8KeyChannel(ks, tig, 0)): zeros of c, c + 1; their scales; the same
      // for c + 2, c + 3.
      const uint4 zs = *reinterpret_cast<const uint4*>(params + 4 * Tc8KeyChannel(ks, tig, 0));
      const uint32_t z01 = zs.x, s01 = zs.y, z23 = zs.z, s23 = zs.w;
      const uint32_t a[4] = {mma::ByteSignHalfMasks(w7, w5, j) & s01, mma::ByteSignHalfMasks(w6, w4, j) & s01,
                             mma::ByteSignHalfMasks(w3, w1, j) & s23, mma::ByteSignHalfMasks(w2, w, j) & s23};
      // Rows gid: the zeros; rows gid + 8 the scales, whose sums (cz[2], cz[3]) are not used: the
      // fragment is the load as it lands, with no register zeroed a k-step.
      const uint32_t az[4] = {z01, s01, z23, s23};
#pragma unroll
      for (int n = 0; n < NTK; ++n) {
        const uint2 b = Kivi2QueryB<NTK, QB_SHARED>(qb, qbs, n, ks, lane);
        mma::MmaF16F32((ks & 1) ? cb[n] : ca[n], a, b.x, b.y);
        mma::MmaF16F32(cz[n], az, b.x, b.y);
      }
    }
  }
#pragma unroll
  for (int n = 0; n < NTK; ++n) dot[n] = Kivi2TcDot(ca[n], cb[n], cz[n]);
}

// Channels 4·lane..4·lane + 3's running maxima with one more block's parameters (256 words,
// 16-byte aligned): z_max (f16x2) holds the largest |z| of channels 4·lane and 4·lane + 2 (low
// half) and of 4·lane + 1 and 4·lane + 3 (high half), s_max the same for |s|. NaN propagates: a
// NaN parameter leaves η NaN (a vacuous cell), never a small one. The sign bit of z_max's low half,
// never a maximum's, marks that a block was taken (Kivi2TcParamMaxSeen).
constexpr uint32_t Kivi2TcParamMaxSeen = 0x8000u;
__device__ __forceinline__ void Kivi2TcParamMax(const uint8_t* params, int lane, uint32_t* z_max, uint32_t* s_max) {
  const uint4 zs = reinterpret_cast<const uint4*>(params)[lane];
  auto max2 = [](uint32_t a, uint32_t b) {
    uint32_t r;
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  };
  constexpr uint32_t kMag = 0x7fff7fffu;
  *z_max = max2(*z_max & kMag, max2(zs.x & kMag, zs.z & kMag)) | Kivi2TcParamMaxSeen;
  *s_max = max2(*s_max, max2(zs.y & kMag, zs.w & kMag));
}

// Once a split: w[n] ≥ Σ_c (|hi_c| + |lo_c|)·(Z(c) + 3·S(c)) for head 4n + tig, from every lane's
// maxima (Kivi2TcParamMax) and the lane's digits. Lane (gid, tig) holds, for k-step ks, digit
// gid % 2 of head 4n + gid / 2 at channels c..c + 3, c = Tc8KeyChannel(ks, tig, 0), whose maxima
// lane c / 4 keeps: 32 fmas, then the sum over tig and both digits (three shuffles), then head
// 4n + tig's from lane 8·tig. Non-negative terms, ≤ 32 + 3 roundings and the fma of Z + 3S: the
// result is ≥ the exact sum times (1 − 36u); TcLogitEtaKivi2Of's (1 + 2^-16) covers that.
template <int NTK, bool QB_SHARED>
__device__ __forceinline__ void Kivi2TcBoundSum(uint32_t z_max, uint32_t s_max, const uint32_t (&qb)[NTK][8][2],
                                                const uint2* qbs, int lane, float (&w)[NTK]) {
  const int tig = lane & 3;
  float bound[8][2];  // Z + 3S of the k-step's even and odd channels
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    const int src = Tc8KeyChannel(ks, tig, 0) / 4;
    const uint32_t z = __shfl_sync(0xffffffffu, z_max, src) & ~Kivi2TcParamMaxSeen;
    const uint32_t s = __shfl_sync(0xffffffffu, s_max, src);
    bound[ks][0] = fmaf(3.0f, F16LowHalf(s), F16LowHalf(z));
    bound[ks][1] = fmaf(3.0f, F16HighHalf(s), F16HighHalf(z));
  }
#pragma unroll
  for (int n = 0; n < NTK; ++n) {
    float acc = 0.0f;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const uint2 b = Kivi2QueryB<NTK, QB_SHARED>(qb, qbs, n, ks, lane);
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // channels c + 2r (low half), c + 2r + 1 (high half)
        const uint32_t d = r == 0 ? b.x : b.y;
        acc = fmaf(fabsf(F16LowHalf(d)), bound[ks][0], acc);
        acc = fmaf(fabsf(F16HighHalf(d)), bound[ks][1], acc);
      }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    w[n] = __shfl_sync(0xffffffffu, acc, 8 * tig);
  }
}

}  // namespace witcert::cuda_kv
