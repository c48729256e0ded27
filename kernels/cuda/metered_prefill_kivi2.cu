// The metered chunked-prefill kernel for kivi2 (contract in metered_prefill_cuda.h): the float-key
// kernel's CTA shape, ring and row sums (metered_prefill_rows.cuh), with kivi2's keys on tensor
// cores as the pipelined decode kernel takes them (pipe_tc_kivi2_keys.cuh, tc_logit_eta.cuh's
// TcLogitEtaKivi2), operand roles swapped: A = 16 query vectors, B = 8 tokens.
//
// Structure (why):
//  * Keys: k̃_c = fl(z_c + s_c·m_c), fp16 (z_c, s_c) per channel of the (block, KV head), 2-bit
//    codes m_c = b0_c + 2·b1_c. Per tile the CTA converts the codes once into two bit-plane tiles,
//    R0 = s_c·b0_c and R1 = s_c·b1_c (exact fp16: s_c or 0), 16-byte chunks swizzled by token % 8.
//    Per n-tile (8 tokens, one block since block_size ≥ 8) and query digit g (hi, lo): each plane
//    and the block's zero row (B = z in every column, a broadcast load) in a chain of 8 k-steps;
//    then P0 = c0_hi + c0_lo, P1 the same over R1, Pz = cz_hi + cz_lo, and (P0 + Pz) + 2·P1
//    (Kivi2TcDot's order), times the vector's unscale. TcLogitEtaKivi2Of bounds it, with Ŵ =
//    Σ_c (|hi_c| + |lo_c|)·(Z(c) + 3·S(c)), Z(c), S(c) the largest |z_c|, |s_c| over every coded
//    block the CTA read (kept per channel in shared memory; the per-lane sum has ≤ 37 roundings of
//    non-negative terms, inside that function's (1 + 2^-16)). That bound's derivation
//    (tc_logit_eta.cuh) takes the planes in chains of 4 and the zeros in a chain of 8 and bounds
//    the MMAs' error by 8.02μ·W; with the planes in chains of 8 too, the error is ≤ 8.02μ·(T_P0 +
//    2·T_P1 + T_z) ≤ 8.02μ·W (b0 + 2·b1 = m ≤ 3), the same, and the sum has five fp32 additions
//    where the derivation counts nine.
//  * Blocks listed in the exact table (unencoded: the chunk's last, partly filled block) are read
//    exact: their n-tiles' logits are fp32 dots on CUDA cores (the decode kernel's KeyLogit: η_t =
//    EtaFactor(d)·Σ|q_c k_c|/√d), ε̂ = ρ = 0, ν = ‖v‖ of the exact row (wide-range form), their
//    values from the exact row. The vector's η is the larger of the two kinds'. The CTA computes a
//    tile's exact logits together into shared memory before the tensor-core pass (Smem::xlg).
//  * Values, output only: ṽ_c = z + s·m_c rounded to fp16 in the [channel, token] tile.
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/metered_prefill_launch.h"
#include "kernels/cuda/metered_prefill_rows.cuh"
#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/tc_logit_eta.cuh"

namespace witcert {
namespace {

using cuda_copy::CpAsync16;
using cuda_copy::CpAsyncCommit;
using cuda_copy::CpAsyncWait;
using cuda_kv::Bf16Bits;
using cuda_kv::F16HighHalf;
using cuda_kv::F16LowHalf;
using prefill::kBands;
using prefill::kD;
using prefill::kRing;
using prefill::kThreads;
using prefill::kTile;
using prefill::kVecs;
using prefill::kVPitch;
using prefill::Params;

constexpr int kCodeBytes = kD / 4;        // 2 bits per channel
constexpr int kTileBlocks = kTile / 8;    // most blocks a tile touches (block_size ≥ 8)

struct Stage {
  uint8_t kc[kTile][kCodeBytes];            // K codes: channel c at bits 2(c % 4) of byte c / 4
  uint8_t vc[kTile][kCodeBytes];            // V codes
  alignas(16) uint32_t kparam[kTileBlocks][kD];  // per block of the tile: words 2p = zeros, 2p + 1 = scales of channels 2p, 2p + 1
  alignas(16) uint32_t vzs[kTile];          // V (zero, scale) fp16 pair, zero in the low half
  alignas(16) uint8_t kw[kTile][kBands];    // K band codes c_b
  alignas(16) uint16_t ku[kTile];           // K band units U, bf16
  alignas(16) uint32_t vsum[kTile];         // V summaries: bf16 ρ (low half), ν (high half)
  int32_t eslot[kTileBlocks];               // exact-table slot of the tile's block, or −1
};

struct Smem {
  Stage ring[kRing];
  uint32_t plane[2][kTile][kD / 2];  // R0, R1 as fp16 pairs [token][word], 16-byte chunks swizzled by token % 8
  __half vt[kD][kVPitch];            // V of the current tile as fp16, [channel, token]
  float zmax[kD], smax[kD];          // Z(c), S(c) over the coded blocks read
  // A tile with an exact block: each (vector, token)'s fp32 logit and η, each token's ν = ‖v‖,
  // computed by the whole CTA before the tensor-core pass, which only reads them: inside that
  // pass the fp32 dots would take registers from the MMAs (and spill).
  float xlg[kVecs][kTile], xeta[kVecs][kTile], xnu[kTile];
  uint4 qdig[prefill::kWarps][1][8][32];  // meter: the query's lo digit (QueryRows with SMEM_DIGITS)
};

template <bool METER>
__global__ void __launch_bounds__(kThreads, 2) MeteredPrefillKivi2Kernel(const Params P) {
  extern __shared__ __align__(16) uint8_t dsm[];
  Smem& sm = *reinterpret_cast<Smem*>(dsm);
  const MeteredPrefillCudaArgs& a = P.a;
  const PagedKvLayout& L = P.layout;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int kvh = blockIdx.y, G = P.group;
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kVecs;  // first vector of the CTA
  const int64_t nvec = a.num_rows * G;
  const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(kD));
  const int bs = L.block_size, bshift = P.bs_shift;

  prefill::QueryRows<false, false, METER, METER> rows;
  rows.Load(P, v0, warp, gid, tig, inv_sqrt_d, &sm.qdig[warp][0][0][0]);
  sm.zmax[tid] = 0.0f;  // kThreads == kD: thread c owns channel c's maxima
  sm.smax[tid] = 0.0f;
  const prefill::CtaSpan span(P, v0, rows.ctx);
  const int64_t cta_end = span.end, warp_end = span.warp_end;
  const int num_tiles = span.num_tiles;
  // Blocks of a tile: 32 / block_size (1 from block_size 32 on); tile block of tile token t.
  const int tile_blocks = bs >= kTile ? 1 : kTile >> bshift;
  auto tile_block = [&](int64_t base, int t) {
    return static_cast<int>(((base + t) >> bshift) - (base >> bshift));
  };

  // ---- the tile loader: thread (token tid / 4, part tid % 4): K chunk 0/1, V chunk 0/1
  const int ld_t = tid >> 2, ld_p = tid & 3;
  const int32_t hkv = L.num_kv_heads, bmask = bs - 1;
  auto issue = [&](int k) {
    if (k < num_tiles) {
      Stage& st = sm.ring[k % kRing];
      const int64_t base = static_cast<int64_t>(k) * kTile;
      int64_t vec;
      const bool ok = prefill::TileTokenVector(P, k, ld_t, cta_end, &vec);
      const int c = ld_p & 1;
      if (ld_p < 2) {
        CpAsync16(&st.kc[ld_t][c * 16], P.kv.k_codes + vec * kCodeBytes + c * 16, ok);
      } else {
        CpAsync16(&st.vc[ld_t][c * 16], P.kv.v_codes + vec * kCodeBytes + c * 16, ok);
      }
      // Runs of 4 tokens (16 bytes) never cross a block (block_size ≥ 8).
      if (ld_p == 2 && (ld_t & 3) == 0) CpAsync16(&st.vzs[ld_t], P.kv.v_scales + vec * 2, ok);
      if constexpr (METER) prefill::IssueWitnesses(st.kw, st.ku, st.vsum, P.kv, vec, ld_t, ld_p, ok);
      // Key group parameters: block b = tid / 32 of the tile, 16-byte chunk tid % 32; its slot.
      const int b = tid >> 5, chunk = tid & 31;
      if (b < tile_blocks) {
        const int64_t bpos = bs >= kTile ? base : base + (static_cast<int64_t>(b) << bshift);
        const bool bok = bpos < cta_end;
        const int32_t blk = bok ? a.block_table[bpos >> bshift] : 0;
        const int64_t unit = static_cast<int64_t>(blk) * hkv + kvh;
        CpAsync16(&st.kparam[b][chunk * 4], P.kv.k_group + unit * (2 * kD) + chunk * 8, bok);
        if (chunk == 0) {  // plain store: this ring slot was last read before the barrier that precedes issue
          st.eslot[b] = bok ? a.exact_slot[(static_cast<int64_t>(blk) * a.num_layers + a.layer) * hkv + kvh] : -1;
        }
      }
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int k = 0; k < kRing - 1; ++k) issue(k);

  prefill::RowSums<METER> acc;
  acc.Init();
  float eta_exact[2] = {0.0f, 0.0f};
  prefill::RowEpsDigits eps_digits;  // Tier A's band factors as digits (meter)
  if constexpr (METER) eps_digits.From(rows.qbn, inv_sqrt_d, tig);

  for (int k = 0; k < num_tiles; ++k) {
    CpAsyncWait<kRing - 2>();
    __syncthreads();
    issue(k + kRing - 1);
    const Stage& st = sm.ring[k % kRing];
    const int64_t base = static_cast<int64_t>(k) * kTile;
    auto exact_row = [&](int t, int side) -> const float* {  // tile token t's exact row, or null
      const int32_t slot = st.eslot[tile_block(base, t)];
      if (slot < 0) return nullptr;
      return a.exact_kv + ((static_cast<int64_t>(slot) * 2 + side) * bs + ((base + t) & bmask)) * kD;
    };
    // (a) V tile → fp16 [channel, token]: token t = tid % 32, channels 32·(tid / 32) + [0, 32).
    {
      const int t = tid & 31, cb = tid >> 5;
      const float* xr = base + t < cta_end ? exact_row(t, 1) : nullptr;
      if (xr != nullptr) {
#pragma unroll 4
        for (int i = 0; i < 32; ++i) sm.vt[cb * 32 + i][t] = __float2half_rn(__ldg(xr + cb * 32 + i));
      } else {
        float z, s;
        cuda_kv::DevKivi2::UnpackPair(st.vzs[t], &z, &s);
        const uint2 codes = *reinterpret_cast<const uint2*>(&st.vc[t][cb * 8]);
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const uint32_t w = i < 16 ? codes.x : codes.y;
          const float m = static_cast<float>((w >> (2 * (i & 15))) & 3u);
          sm.vt[cb * 32 + i][t] = __float2half_rn(__fadd_rn(z, __fmul_rn(s, m)));
        }
      }
    }
    // (b) K bit planes: token kt = tid / 4, channels 32·(tid % 4) + [0, 32), four 8-channel chunks.
    {
      const int kt = tid >> 2, kp = tid & 3;
      const uint32_t* sc = st.kparam[tile_block(base, kt)];
      const uint2 codes = *reinterpret_cast<const uint2*>(&st.kc[kt][kp * 8]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t cw = j < 2 ? codes.x : codes.y;  // 16 channels per word
        uint32_t r0[4], r1[4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {  // channels c, c + 1 with c = 32kp + 8j + 2w
          const int c = 32 * kp + 8 * j + 2 * w;
          const uint32_t bits = (cw >> (2 * ((8 * j + 2 * w) & 15))) & 0xfu;  // b0(c) b1(c) b0(c+1) b1(c+1)
          const uint32_t s2 = sc[c + 1];  // scales of channels c, c + 1 (word 2·(c/2) + 1)
          const uint32_t m0 = ((bits & 1u) ? 0x0000ffffu : 0u) | ((bits & 4u) ? 0xffff0000u : 0u);
          const uint32_t m1 = ((bits & 2u) ? 0x0000ffffu : 0u) | ((bits & 8u) ? 0xffff0000u : 0u);
          r0[w] = s2 & m0;
          r1[w] = s2 & m1;
        }
        const int chunk = (4 * kp + j) ^ (kt & 7);
        *reinterpret_cast<uint4*>(&sm.plane[0][kt][chunk * 4]) = make_uint4(r0[0], r0[1], r0[2], r0[3]);
        *reinterpret_cast<uint4*>(&sm.plane[1][kt][chunk * 4]) = make_uint4(r1[0], r1[1], r1[2], r1[3]);
      }
    }
    // (b') a tile with an exact block: its exact tokens' logits, η and ν, CTA-wide.
    bool tile_exact = false;
    for (int b = 0; b < tile_blocks; ++b) tile_exact = tile_exact || st.eslot[b] >= 0;
    if (tile_exact) {
#pragma unroll 1
      for (int i = tid; i < kVecs * kTile; i += kThreads) {
        const int v = i / kTile, t = i % kTile;
        const int64_t gv = v0 + v;
        const float* xk = exact_row(t, 0);
        if (gv >= nvec || xk == nullptr || base + t >= a.start_pos + gv / G + 1) continue;  // unread
        const int head = static_cast<int>(kvh * G + gv % G);
        float eta = 0.0f;
        sm.xlg[v][t] =
            cuda_kv::ExactKeyLogit<kD, METER, 1>(a.q + (gv / G) * a.q_stride + static_cast<int64_t>(head) * kD, xk, inv_sqrt_d, &eta);
        sm.xeta[v][t] = eta;
      }
      if constexpr (METER) {  // ν = ‖v‖ of each exact token (the wide-range norm): 16 lanes a token
#pragma unroll 1
        for (int t0 = 2 * warp; t0 < kTile; t0 += 2 * prefill::kWarps) {
          const int t = t0 + (lane >> 4), ch0 = (lane & 15) * 8;
          const float* xv = base + t < cta_end ? exact_row(t, 1) : nullptr;
          float x[8] = {};
          if (xv != nullptr) {
            const float4 lo = __ldg(reinterpret_cast<const float4*>(xv + ch0));
            const float4 hi = __ldg(reinterpret_cast<const float4*>(xv + ch0 + 4));
            x[0] = lo.x; x[1] = lo.y; x[2] = lo.z; x[3] = lo.w;
            x[4] = hi.x; x[5] = hi.y; x[6] = hi.z; x[7] = hi.w;
          }
          const float norm = cuda_kv::WideRangeRowNorm<kD, kD / 8>(x, 1.0f);  // every lane calls
          if ((lane & 15) == 0) sm.xnu[t] = xv != nullptr ? norm : 0.0f;
        }
      }
    }
    // (c) η's per-channel maxima over the tile's coded blocks with a token the CTA reads.
    if constexpr (METER) {
      for (int b = 0; b < tile_blocks; ++b) {
        const int64_t bpos = bs >= kTile ? base : base + (static_cast<int64_t>(b) << bshift);
        if (bpos >= cta_end || st.eslot[b] >= 0) continue;
        const uint32_t zw = st.kparam[b][2 * (tid >> 1)], sw = st.kparam[b][2 * (tid >> 1) + 1];
        const float z = (tid & 1) ? F16HighHalf(zw) : F16LowHalf(zw);
        const float s = (tid & 1) ? F16HighHalf(sw) : F16LowHalf(sw);
        sm.zmax[tid] = meter::MaxAcc(sm.zmax[tid], fabsf(z));
        sm.smax[tid] = meter::MaxAcc(sm.smax[tid], fabsf(s));
      }
    }
    __syncthreads();
    if (base >= warp_end) continue;  // every row of this warp ends before the tile

    // (d) logits: 4 n-tiles of 8 tokens; c0,c1 row gid, c2,c3 row gid+8, tokens 8·nt + 2·tig + {0, 1}.
    float lg[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int tb = tile_block(base, nt * 8);
      if (st.eslot[tb] >= 0) {  // an exact block (uniform across the CTA): computed in (b')
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1, tok = nt * 8 + 2 * tig + (e & 1), v = warp * 16 + gid + 8 * r;
          const bool seen = base + tok < rows.ctx[r];
          lg[nt][e] = seen ? sm.xlg[v][tok] : -INFINITY;
          if (METER && seen) eta_exact[r] = meter::MaxAcc(eta_exact[r], sm.xeta[v][tok]);
        }
        continue;
      }
      const uint32_t* zrow = st.kparam[tb];
      const int brow = nt * 8 + gid, sw = brow & 7;
      float cp[2][2][4] = {}, cz[2][4] = {};  // [plane][digit][element], [digit][element]: chains of 8
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
        const uint32_t p00 = sm.plane[0][brow][(((2 * ks) ^ sw) << 2) + tig];
        const uint32_t p01 = sm.plane[0][brow][(((2 * ks + 1) ^ sw) << 2) + tig];
        const uint32_t p10 = sm.plane[1][brow][(((2 * ks) ^ sw) << 2) + tig];
        const uint32_t p11 = sm.plane[1][brow][(((2 * ks + 1) ^ sw) << 2) + tig];
        const uint32_t z0 = zrow[16 * ks + 2 * tig], z1 = zrow[16 * ks + 8 + 2 * tig];  // the k-step's zeros
#pragma unroll
        for (int dg = 0; dg < 2; ++dg) {
          uint32_t qf[4];
          rows.Frag(dg, ks, qf);
          mma::MmaF16F32(cp[0][dg], qf, p00, p01);
          mma::MmaF16F32(cp[1][dg], qf, p10, p11);
          mma::MmaF16F32(cz[dg], qf, z0, z1);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, tok = nt * 8 + 2 * tig + (e & 1);
        const float p0 = cp[0][0][e] + cp[0][1][e];
        const float p1 = cp[1][0][e] + cp[1][1][e];
        const float pz = cz[0][e] + cz[1][e];
        lg[nt][e] = base + tok < rows.ctx[r] ? fmaf(2.0f, p1, p0 + pz) * rows.unscale[r] : -INFINITY;
      }
    }
    // (e)–(g): online softmax, certificate terms, o += P·V.
    acc.AddTile(lg, eps_digits, st.kw, sm.vt, gid, tig, [&](int tok) {
      prefill::TokenTerms tt;
      tt.rho = tt.nu = 0.0f;
      tt.sv = 1.0f;
      if constexpr (METER) {
        if (st.eslot[tile_block(base, tok)] >= 0) {
          tt.SetExactKey();
          tt.nu = sm.xnu[tok];
        } else {
          tt.kunit = Bf16Bits(st.ku[tok]);
          tt.rho = cuda_kv::SummaryRho(st.vsum[tok]);
          tt.nu = cuda_kv::SummaryNu(st.vsum[tok]);
        }
      }
      return tt;
    });
  }
  CpAsyncWait<0>();
  __syncthreads();  // zmax / smax complete

  // ---- η per row: the coded tokens' bound from Ŵ, the exact tokens' largest; the quad's maxima.
  float eta[2] = {0.0f, 0.0f};
  if constexpr (METER) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float w = 0.0f;
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint32_t fh[4], fl[4];
          rows.Frag(0, ks, fh);
          rows.Frag(1, ks, fl);
          const uint32_t hi = fh[2 * h + r], lo = fl[2 * h + r];
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int c = 16 * ks + 8 * h + 2 * tig + j;
            const float dsum = fabsf(j ? F16HighHalf(hi) : F16LowHalf(hi)) + fabsf(j ? F16HighHalf(lo) : F16LowHalf(lo));
            w = fmaf(dsum, fmaf(3.0f, sm.smax[c], sm.zmax[c]), w);
          }
        }
      }
      w += __shfl_xor_sync(0xffffffffu, w, 1);
      w += __shfl_xor_sync(0xffffffffu, w, 2);
      eta_exact[r] = meter::MaxAcc(eta_exact[r], __shfl_xor_sync(0xffffffffu, eta_exact[r], 1));
      eta_exact[r] = meter::MaxAcc(eta_exact[r], __shfl_xor_sync(0xffffffffu, eta_exact[r], 2));
      eta[r] = meter::MaxAcc(cuda_kv::TcLogitEtaKivi2Of(w, rows.unscale[r]), eta_exact[r]);
    }
  }
  acc.Finish(P, rows, v0, warp, lane, eta);
}

}  // namespace

CudaStatus prefill::LaunchKivi2(const Params& p, dim3 grid, cudaStream_t stream) {
  static_assert(kThreads == kD, "one thread per channel for the η maxima");
  const size_t smem = sizeof(Smem);
  auto kernel = p.a.meter ? MeteredPrefillKivi2Kernel<true> : MeteredPrefillKivi2Kernel<false>;
  return prefill::LaunchWithSmem(kernel, smem, grid, stream, p);
}

}  // namespace witcert
