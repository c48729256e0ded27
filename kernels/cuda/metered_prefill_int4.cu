// The metered chunked-prefill kernel for int4-rtn KV (contract in metered_prefill_cuda.h): the
// int8 kernel's exact integer digit dots (metered_prefill_int_digits.cuh) with int4-rtn's group
// scales, and the row sums every prefill kernel shares (metered_prefill_rows.cuh).
//
// Structure (why):
//  * Keys x_c = s_g·n_c, n_c = code − 8 ∈ [−8, 7], a bf16 scale s_g per (token, 32-channel
//    group g). Per tile the CTA unpacks the codes once into an int8 tile (n_c, exact), 16-byte
//    chunks swizzled by token % 8 (a warp's B-fragment loads hit 32 distinct banks). One s8
//    mma.m16n8k32 k-step is one group in natural channel order, so per (n-tile, group) the four
//    query digits' MMAs give the group's exact dots D_{g,j}; T̂_g = CombineDigitDots(D_g), and the
//    groups combine as Int4GroupLogitSum does (s_0·T̂_0, then three fmas), times qscale. η is
//    IntDigitEtaInt4 with the largest group scale the CTA read (int_digit_dot.h has the
//    derivation; the CPU replays it in tests/kernels/meter/int_digit_dot_test.cc).
//  * C element (row, 2·tig + h) of n-tile nt is tile token 8·nt + 2·tig + h (natural order).
//  * Values, output only: ṽ_c = s_g·n_c rounded to fp16 in the [channel, token] tile; the
//    weights go to p·v unscaled.
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/int8_mma_ops.cuh"
#include "kernels/cuda/metered_prefill_int_digits.cuh"
#include "kernels/cuda/metered_prefill_launch.h"
#include "kernels/cuda/metered_prefill_rows.cuh"
#include "kernels/meter/int_digit_dot.h"

namespace witcert {
namespace {

using cuda_copy::CpAsync16;
using cuda_copy::CpAsyncCommit;
using cuda_copy::CpAsyncWait;
using cuda_kv::Bf16Bits;
using cuda_kv::MmaS8;
using prefill::kBands;
using prefill::kD;
using prefill::kRing;
using prefill::kThreads;
using prefill::kTile;
using prefill::kVecs;
using prefill::kVPitch;
using prefill::Params;

constexpr int kGroups = kD / 32;       // int4-rtn scale groups
constexpr int kCodeBytes = kD / 2;     // 4 bits per channel: channel 2b in byte b's low nibble

struct Stage {
  uint8_t kc[kTile][kCodeBytes];
  uint8_t vc[kTile][kCodeBytes];
  alignas(16) uint16_t ks[kTile][kGroups];  // bf16 group scales
  alignas(16) uint16_t vs[kTile][kGroups];
  alignas(16) uint8_t kw[kTile][kBands];    // K band codes c_b
  alignas(16) uint16_t ku[kTile];           // K band units U, bf16
  alignas(16) uint32_t vsum[kTile];         // V summaries: bf16 ρ (low half), ν (high half)
};

struct Smem {
  Stage ring[kRing];
  alignas(16) int8_t kn[kTile][kD];  // the tile's n_c, chunk c of token t at chunk c ^ (t & 7)
  __half vt[kD][kVPitch];            // V of the current tile as fp16, [channel, token]
  prefill::IntDigitQuerySmem q;
};

// Byte b of w (a nibble pair) as two int8 n = code − 8, low nibble first, in the low 16 bits.
__device__ __forceinline__ uint32_t NibblePairToBytes(uint32_t b) {
  const uint32_t lo = (b & 0xfu) - 8u, hi = ((b >> 4) & 0xfu) - 8u;
  return (lo & 0xffu) | ((hi & 0xffu) << 8);
}

template <bool METER>
__global__ void __launch_bounds__(kThreads, 2) MeteredPrefillInt4Kernel(const Params P) {
  extern __shared__ __align__(16) uint8_t dsm[];
  Smem& sm = *reinterpret_cast<Smem*>(dsm);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kVecs;  // first vector of the CTA
  const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(kD));

  prefill::IntDigitRows<METER> rows_q;
  rows_q.Load(P, sm.q, v0, warp, lane, inv_sqrt_d);
  const int64_t(&ctx)[2] = rows_q.ctx;
  const int(&vloc)[2] = rows_q.vloc;
  // A fragments: digit j, group g: channels 32g + 4·tig + [0, 4) (registers 0, 1: rows gid, gid + 8)
  // and 32g + 16 + 4·tig + [0, 4) (registers 2, 3).
  uint32_t qa[4][kGroups][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int c0 = 32 * g + 4 * tig;
      qa[j][g][0] = *reinterpret_cast<const uint32_t*>(&sm.q.qdig[j][vloc[0]][c0]);
      qa[j][g][1] = *reinterpret_cast<const uint32_t*>(&sm.q.qdig[j][vloc[1]][c0]);
      qa[j][g][2] = *reinterpret_cast<const uint32_t*>(&sm.q.qdig[j][vloc[0]][c0 + 16]);
      qa[j][g][3] = *reinterpret_cast<const uint32_t*>(&sm.q.qdig[j][vloc[1]][c0 + 16]);
    }
  }
  const prefill::CtaSpan span(P, v0, ctx);
  const int64_t cta_end = span.end, warp_end = span.warp_end;
  const int num_tiles = span.num_tiles;

  // ---- the tile loader: thread (token tid / 4, part tid % 4): K and V chunk `part`
  const int ld_t = tid >> 2, ld_p = tid & 3;
  auto issue = [&](int k) {
    if (k < num_tiles) {
      Stage& st = sm.ring[k % kRing];
      int64_t vec;
      const bool ok = prefill::TileTokenVector(P, k, ld_t, cta_end, &vec);
      CpAsync16(&st.kc[ld_t][ld_p * 16], P.kv.k_codes + vec * kCodeBytes + ld_p * 16, ok);
      CpAsync16(&st.vc[ld_t][ld_p * 16], P.kv.v_codes + vec * kCodeBytes + ld_p * 16, ok);
      // Group scales: 8 bytes a vector, one 16-byte chunk per 2 tokens (never across a block).
      if ((ld_t & 1) == 0 && ld_p >= 2) {
        CpAsync16(ld_p == 2 ? &st.ks[ld_t][0] : &st.vs[ld_t][0],
                  (ld_p == 2 ? P.kv.k_scales : P.kv.v_scales) + vec * kGroups, ok);
      }
      if constexpr (METER) prefill::IssueWitnesses(st.kw, st.ku, st.vsum, P.kv, vec, ld_t, ld_p, ok);
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int k = 0; k < kRing - 1; ++k) issue(k);

  prefill::RowSums<METER> acc;
  acc.Init();
  float smaxk = 0.0f;  // η's group-scale max over the CTA's tokens
  prefill::RowEpsDigits eps_digits;  // Tier A's band factors as digits (meter)
  if constexpr (METER) eps_digits.From(rows_q.qbn, inv_sqrt_d, tig);

  for (int k = 0; k < num_tiles; ++k) {
    CpAsyncWait<kRing - 2>();
    __syncthreads();
    issue(k + kRing - 1);
    const Stage& st = sm.ring[k % kRing];
    const int64_t base = static_cast<int64_t>(k) * kTile;
    // (a) V tile → fp16 [channel, token]: token t = tid % 32, group g = tid / 32 (32 channels).
    {
      const int t = tid & 31, g = tid >> 5;
      const float s = Bf16Bits(st.vs[t][g]);
      const uint4 x = *reinterpret_cast<const uint4*>(&st.vc[t][g * 16]);
      const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int n = static_cast<int>((w[i >> 3] >> (4 * (i & 7))) & 0xfu) - 8;
        sm.vt[g * 32 + i][t] = __float2half_rn(s * static_cast<float>(n));
      }
    }
    // (b) K tile → n_c as int8: token kt = tid / 4, group kp = tid % 4 (16 code bytes → 32 bytes).
    {
      const int kt = tid >> 2, kp = tid & 3;
      const uint4 x = *reinterpret_cast<const uint4*>(&st.kc[kt][kp * 16]);
      const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // 16-byte chunk 2kp + h: code words 2h, 2h + 1
        uint32_t o[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t cw = w[2 * h + (i >> 1)] >> (16 * (i & 1));  // two code bytes
          o[i] = NibblePairToBytes(cw & 0xffu) | (NibblePairToBytes((cw >> 8) & 0xffu) << 16);
        }
        const int chunk = (2 * kp + h) ^ (kt & 7);
        *reinterpret_cast<uint4*>(&sm.kn[kt][chunk * 16]) = make_uint4(o[0], o[1], o[2], o[3]);
      }
    }
    __syncthreads();
    if (base >= warp_end) continue;  // every row of this warp ends before the tile

    // (c) logits: per n-tile and group, the four digits' exact dots, then the groups' scales.
    float lg[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int brow = nt * 8 + gid, sw = brow & 7;
      const uint32_t* krow = reinterpret_cast<const uint32_t*>(&sm.kn[brow][0]);
      float l[4];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const uint32_t b0 = krow[(((2 * g) ^ sw) << 2) + tig];      // channels 32g + 4·tig + [0, 4)
        const uint32_t b1 = krow[(((2 * g + 1) ^ sw) << 2) + tig];  // 32g + 16 + 4·tig + [0, 4)
        int32_t dj[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          dj[j][0] = dj[j][1] = dj[j][2] = dj[j][3] = 0;
          MmaS8(dj[j], qa[j][g], b0, b1);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int tok = nt * 8 + 2 * tig + (e & 1);
          const float t_hat = meter::CombineDigitDots(dj[0][e], dj[1][e], dj[2][e], dj[3][e]);
          const float s = Bf16Bits(st.ks[tok][g]);
          l[e] = g == 0 ? s * t_hat : fmaf(s, t_hat, l[e]);  // Int4GroupLogitSum's order
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, tok = nt * 8 + 2 * tig + (e & 1);
        lg[nt][e] = base + tok < ctx[r] ? l[e] * rows_q.qscale[r] : -INFINITY;
      }
    }
    if constexpr (METER) {  // η's group-scale max over the CTA's real tokens: a lane a token
      const int tok = 8 * tig + gid;
      if (base + tok < cta_end) {
#pragma unroll
        for (int g = 0; g < kGroups; ++g) smaxk = meter::MaxAcc(smaxk, Bf16Bits(st.ks[tok][g]));
      }
    }
    // (d)–(f): online softmax, certificate terms, o += P·V.
    acc.AddTile(lg, eps_digits, st.kw, sm.vt, gid, tig, [&](int tok) {
      prefill::TokenTerms tt;
      tt.rho = tt.nu = 0.0f;
      tt.sv = 1.0f;
      if constexpr (METER) {
        tt.kunit = Bf16Bits(st.ku[tok]);
        tt.rho = cuda_kv::SummaryRho(st.vsum[tok]);
        tt.nu = cuda_kv::SummaryNu(st.vsum[tok]);
      }
      return tt;
    });
  }
  CpAsyncWait<0>();

  // ---- η per row (the largest group scale any lane of the warp saw), the output, the certificate
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) smaxk = meter::MaxAcc(smaxk, __shfl_xor_sync(0xffffffffu, smaxk, o));
  float eta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int v = vloc[r];
    eta[r] = !METER || rows_q.bad[r] ? INFINITY
                                   : meter::IntDigitEtaInt4(sm.q.q1[v], sm.q.qexp[v], kD, smaxk, sm.q.qscale[v]);
  }
  acc.Finish(P, rows_q, v0, warp, lane, eta);
}

}  // namespace

CudaStatus prefill::LaunchInt4(const Params& p, dim3 grid, cudaStream_t stream) {
  const size_t smem = sizeof(Smem);
  auto kernel = p.a.meter ? MeteredPrefillInt4Kernel<true> : MeteredPrefillInt4Kernel<false>;
  return prefill::LaunchWithSmem(kernel, smem, grid, stream, p);
}

}  // namespace witcert
