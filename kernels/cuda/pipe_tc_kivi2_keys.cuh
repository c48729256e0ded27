// kivi2's logits on tensor cores: the pipelined decode kernel's K pass at d = 128
// (metered_decode_pipelined.cuh, kTcK2), one warp's 8 tokens of a stage against the query's fp16
// digits (pipe_tc_query.cuh, fp8's channel mapping: Tc8KeyChannel). The keys are never decoded:
// with k̃_c = fl(z_c + s_c·m_c) and m_c = b0_c + 2·b1_c, each k-step's A fragment is
//   rows gid (token 8w + gid):  s_c·b0_c   — s_c where the code's low bit is set, else 0,
//   rows gid + 8 (same token): s_c·b1_c   — the high bit,
// both exact fp16 (a PRMT mask over the block's s pair, ByteSignHalfMasks), so one MMA takes both
// planes and the token's sum is row gid + 2·row gid + 8. The zero term Σ d_c·z_c (the block's,
// the same on every row) is a second MMA a k-step with z in rows gid, into the same two chains
// (even and odd k-steps: 8 MMAs each), and with the meter a third chain forms the block's Ŵz, Ŵs
// for η (tc_logit_eta.cuh, TcLogitEtaKivi2Of; certificates.md). Costs per lane and k-step: one
// 16-byte load of the block's (z, s) words, four PRMTs to pair them, four mask PRMTs and four ANDs
// for the planes, and 2 (3 with the meter) MMAs per 4 heads; the codes' 7 shifts a word. (A chain
// of the zeros' own would halve the chain factor of η's z part, 8.02μ → 4.01μ, for 4 more
// accumulator registers an n-tile; not measured.)
#pragma once

#include <cstdint>

#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/tc8_layout.h"
#include "kernels/cuda/tc_logit_eta.cuh"

namespace witcert::cuda_kv {

// codes: the lane's token's 32 code bytes (row gid of the warp's tile; channel c's code at bits
// 2·(c % 4) of byte c / 4); params: the token's block's [128] (z, s) words (zero in the low half),
// 16-byte aligned; qb: the query's B fragments [n-tile][k-step][register], or with QB_SHARED
// qbs, the same in shared memory [n-tile][k-step][lane] (8 heads with the meter, whose registers
// would spill). Out: dot[n], the token's Σ d_c·k_c for head 4n + tig before the unscale
// (Kivi2TcDot); METER: cw[n], the bound chain's accumulator for that head (the block's,
// TcLogitEtaKivi2Of).
template <int NTK, bool METER, bool QB_SHARED>
__device__ __forceinline__ void Kivi2TcKeyTile(const uint8_t* codes, const uint8_t* params, int lane,
                                               const uint32_t (&qb)[NTK][8][2], const uint2* qbs, float (&dot)[NTK],
                                               float (&cw)[NTK][4]) {
  const int tig = lane & 3;
  auto b_of = [&](int n, int ks) -> uint2 {
    if constexpr (QB_SHARED) {
      return qbs[(n * 8 + ks) * 32 + lane];
    } else {
      return make_uint2(qb[n][ks][0], qb[n][ks][1]);
    }
  };
  constexpr uint32_t kMag = 0x7fff7fffu;  // both halves' sign bits cleared
  const uint32_t* row = reinterpret_cast<const uint32_t*>(codes);
  const uint32_t words[2] = {row[tig], row[tig + 4]};  // k-steps 0-3, 4-7 (Tc8KeyChannel)
  float ca[NTK][4], cb[NTK][4];  // the chains of even and odd k-steps
#pragma unroll
  for (int n = 0; n < NTK; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) ca[n][i] = cb[n][i] = cw[n][i] = 0.0f;
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
      const uint4 zs = *reinterpret_cast<const uint4*>(params + 4 * Tc8KeyChannel(ks, tig, 0));
      const uint32_t s01 = __byte_perm(zs.x, zs.y, 0x7632), s23 = __byte_perm(zs.z, zs.w, 0x7632);
      const uint32_t z01 = __byte_perm(zs.x, zs.y, 0x5410), z23 = __byte_perm(zs.z, zs.w, 0x5410);
      const uint32_t a[4] = {mma::ByteSignHalfMasks(w7, w5, j) & s01, mma::ByteSignHalfMasks(w6, w4, j) & s01,
                             mma::ByteSignHalfMasks(w3, w1, j) & s23, mma::ByteSignHalfMasks(w2, w, j) & s23};
      const uint32_t az[4] = {z01, 0u, z23, 0u};
#pragma unroll
      const uint32_t aw[4] = {z01 & kMag, s01 & kMag, z23 & kMag, s23 & kMag};
#pragma unroll
      for (int n = 0; n < NTK; ++n) {
        const uint2 b = b_of(n, ks);
        mma::MmaF16F32((ks & 1) ? cb[n] : ca[n], a, b.x, b.y);
        mma::MmaF16F32((ks & 1) ? cb[n] : ca[n], az, b.x, b.y);
        if constexpr (METER) mma::MmaF16F32(cw[n], aw, b.x & kMag, b.y & kMag);
      }
    }
  }
#pragma unroll
  for (int n = 0; n < NTK; ++n) dot[n] = Kivi2TcDot(ca[n], cb[n]);
}

}  // namespace witcert::cuda_kv
