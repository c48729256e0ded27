// The metered chunked-prefill kernel for int8-rtn KV (contract in metered_prefill_cuda.h).
//
// Structure (why):
//  * CTA = 4 warps, 64 query vectors of one KV head: vector v ↔ (row v / G, head v % G) of
//    the chunk, so a warp's 16 vectors are the 16 rows of its MMA tiles for any G. Each
//    32-token KV tile (codes, scales, witnesses: 8.6 KB) is loaded once per CTA by cp.async
//    into a 3-stage ring and used by all 64 vectors: the chunk reads the stored context
//    ⌈n·G/64⌉ times instead of n times.
//  * q·k: four exact s8 MMAs per (8-token tile, k-step), one per base-128 query digit, all
//    digits of one (vector, token) landing in the same thread, combined by CombineDigitDots:
//    the logits, η (IntDigitEta with the largest key scale the row's quad saw) and every K
//    byte layout (the 16-byte chunk swizzle MmaSwizzle, the channel-permuted k order, token
//    columns 8t + (n>>1) + 4(n&1)) are the tensor-core decode kernel's.
//  * Softmax: online over tiles. A tile whose max exceeds the running max m rescales the
//    running sums (z, the A−1 numerator b, the residual numerator c, and the output) by one
//    f = expf(m − m_new); each such rescale multiplies every earlier term by one rounded
//    exponential (≤ 2 ulp) and one product (u): ≤ κ of cert_math.h, so the kernel counts
//    it as one merge in the partial and SumInflation pays (1+κ) for it. Rescales happen only
//    at a new running maximum; the tests measured bounds within 0.12% of the CPU's two-pass ones.
//    z ≥ 1 still holds: the token holding the final max was added as e^0 after the last
//    rescale. Terms follow PartialAddTokenWeighted (MmaHeadSums::Add); the quad's four
//    threads sum disjoint tokens relative to the same m (SumPartialsSameMax). Per token, ε̂
//    comes from the key band witness (codes c_b and unit U: bounds c_b·U), ρ and the vmax
//    candidate ν ≥ ‖ṽ‖ + ρ from the value summary (kernels/meter/witness_format.h): no
//    per-token ‖ṽ‖.
//  * p·v: the weights times the token's V scale, rounded to fp16, are the A operand of fp16
//    MMAs (fp32 accumulation) against the V codes converted to fp16 (exact: |code| ≤ 127) in
//    a transposed, k-permuted tile (token T at k position kpos(T), so the QK C fragments of
//    two 8-token tiles are one PV A fragment without shuffles). Output only.
//  * Masks: vector v sees tokens < start_pos + row + 1; vectors past the chunk see none and
//    write nothing. A warp skips the compute of tiles past all of its rows.
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/int8_mma_ops.cuh"
#include "kernels/cuda/int8_mma_smem.cuh"
#include "kernels/cuda/metered_prefill_int_digits.cuh"
#include "kernels/cuda/metered_prefill_launch.h"
#include "kernels/cuda/metered_prefill_rows.cuh"
#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/pipe_stage.cuh"
#include "kernels/meter/dither_hash.h"
#include "kernels/meter/int_digit_dot.h"
#include "kernels/meter/partial_sum.h"

namespace witcert {
namespace {

using cuda_kv::Bf16Bits;
using cuda_kv::CpAsync16;
using cuda_kv::CpAsyncCommit;
using cuda_kv::CpAsyncWait;
using cuda_kv::MmaS8;
using cuda_kv::MmaSwizzle;

using prefill::kBands;
using prefill::kD;
using prefill::kRing;
using prefill::kThreads;
using prefill::kTile;
using prefill::kVecs;
using prefill::Params;
using prefill::kVPitch;

struct Stage {
  uint8_t kc[kTile][kD];  // K codes, 16-byte chunk c of token t at chunk position c ^ MmaSwizzle(t)
  uint8_t vc[kTile][kD];  // V codes as stored
  uint16_t ks[kTile], vs[kTile];            // bf16 scales
  alignas(16) uint8_t kw[kTile][kBands];    // K band codes c_b
  alignas(16) uint16_t ku[kTile];           // K band units U, bf16
  alignas(16) uint32_t vsum[kTile];         // V summaries: bf16 ρ (low half), ν (high half)
};

struct Smem {
  Stage ring[kRing];
  __half vt[kD][kVPitch];   // V codes of the current tile as fp16, [channel, kpos(token)]
  prefill::IntDigitQuerySmem q;
  uint64_t thash[kTile];  // int8-dither: the tile's token hashes (DitherTokenHashAt)
};

// k position of tile token T in the transposed V tile (see the file comment).
__device__ __forceinline__ int KPos(int t) {
  return 16 * (t >> 4) + 8 * ((t >> 3) & 1) + 2 * (t & 3) + ((t >> 2) & 1);
}

// FORM (int8-dither, meter on): Tier B's form over each row's context (RowSums).
template <bool METER, bool DITHER, meter::TierBForm FORM = meter::TierBForm::kPerToken>
__global__ void __launch_bounds__(kThreads, 2) MeteredPrefillInt8Kernel(const Params P) {
  static_assert(FORM == meter::TierBForm::kPerToken || (METER && DITHER), "Tier B's forms are int8-dither's, meter on");
  extern __shared__ __align__(16) uint8_t dsm[];
  Smem& sm = *reinterpret_cast<Smem*>(dsm);
  const MeteredPrefillCudaArgs& a = P.a;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int kvh = blockIdx.y;
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kVecs;  // first vector of the CTA
  const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(kD));

  // ---- prologue: digits of the warp's 16 vectors; per-thread rows gid and gid + 8
  prefill::IntDigitRows<METER> rows_q;
  rows_q.Load(P, sm.q, v0, warp, lane, inv_sqrt_d);
  const int64_t(&ctx)[2] = rows_q.ctx;
  const float(&qbn)[2][kBands] = rows_q.qbn;
  const float(&qscale)[2] = rows_q.qscale;
  const int(&vloc)[2] = rows_q.vloc;
  // A fragments: digit j, k-step s (channels tig·32 + 8s + [0, 8), as in the decode kernel).
  uint32_t qa[4][4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int c0 = tig * 32 + s * 8;
      qa[j][s][0] = *reinterpret_cast<const uint32_t*>(&sm.q.qdig[j][vloc[0]][c0]);
      qa[j][s][1] = *reinterpret_cast<const uint32_t*>(&sm.q.qdig[j][vloc[1]][c0]);
      qa[j][s][2] = *reinterpret_cast<const uint32_t*>(&sm.q.qdig[j][vloc[0]][c0 + 4]);
      qa[j][s][3] = *reinterpret_cast<const uint32_t*>(&sm.q.qdig[j][vloc[1]][c0 + 4]);
    }
  }
  // int8-dither: S_j = Σ_c d_{j,c} of the thread's rows (byte sums of the fragments, then over the
  // quad's four lanes: its channels), the head hash, the rows' logit scales and Tier B coefficients.
  int32_t dsum[4][2] = {};
  uint64_t h1 = 0;
  float lscale[2] = {qscale[0], qscale[1]}, tierb[2] = {0.0f, 0.0f};
  if constexpr (DITHER) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int s4 = 0; s4 < 4; ++s4) {
        dsum[j][0] = __dp4a(static_cast<int>(qa[j][s4][0]), 0x01010101, dsum[j][0]);
        dsum[j][0] = __dp4a(static_cast<int>(qa[j][s4][2]), 0x01010101, dsum[j][0]);
        dsum[j][1] = __dp4a(static_cast<int>(qa[j][s4][1]), 0x01010101, dsum[j][1]);
        dsum[j][1] = __dp4a(static_cast<int>(qa[j][s4][3]), 0x01010101, dsum[j][1]);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        dsum[j][r] += __shfl_xor_sync(0xffffffffu, dsum[j][r], 1);
        dsum[j][r] += __shfl_xor_sync(0xffffffffu, dsum[j][r], 2);
      }
    }
    h1 = meter::DitherHeadHash(a.dither_seed, static_cast<uint32_t>(a.layer), static_cast<uint32_t>(kvh));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      lscale[r] = meter::DitherQueryScale(qscale[r]);
      if constexpr (METER) {
        tierb[r] = ctx[r] > 0 ? cuda_kv::TierBCoefficientFromNorms<kD>(qbn[r], kBands, sm.q.q1[vloc[r]], ctx[r], a.delta_loc)
                              : 0.0f;
      }
    }
  }
  const prefill::CtaSpan span(P, v0, ctx);
  const int64_t cta_end = span.end, warp_end = span.warp_end;
  const int num_tiles = span.num_tiles;

  // ---- the tile loader: thread (token tid / 4, part tid % 4)
  const int ld_t = tid >> 2, ld_p = tid & 3;
  auto issue = [&](int k) {
    if (k < num_tiles) {
      Stage& st = sm.ring[k % kRing];
      int64_t vec;
      const bool ok = prefill::TileTokenVector(P, k, ld_t, cta_end, &vec);
#pragma unroll
      for (int c = 2 * ld_p; c < 2 * ld_p + 2; ++c) {
        CpAsync16(&st.kc[ld_t][(c ^ MmaSwizzle(ld_t)) << 4], P.kv.k_codes + vec * kD + c * 16, ok);
        CpAsync16(&st.vc[ld_t][c * 16], P.kv.v_codes + vec * kD + c * 16, ok);
      }
      prefill::IssueScales(st.ks, st.vs, P.kv, vec, ld_t, ld_p, ok);
      if constexpr (METER) {
        prefill::IssueWitnesses<meter::TierBFormReadsKeyWitness(FORM)>(st.kw, st.ku, st.vsum, P.kv, vec, ld_t, ld_p, ok);
      }
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int k = 0; k < kRing - 1; ++k) issue(k);

  prefill::RowSums<METER, FORM> acc;
  acc.Init();
  float smaxk = 0.0f;  // η's key-scale max
  prefill::RowEpsDigits eps_digits;  // Tier A's band factors as digits (meter)
  if constexpr (METER) eps_digits.From(qbn, inv_sqrt_d, tig);

  for (int k = 0; k < num_tiles; ++k) {
    CpAsyncWait<kRing - 2>();
    __syncthreads();
    issue(k + kRing - 1);
    const Stage& st = sm.ring[k % kRing];
    const int64_t base = static_cast<int64_t>(k) * kTile;
    if (DITHER && tid < kTile) sm.thash[tid] = meter::DitherTokenHashAt(h1, static_cast<uint64_t>(base + tid));
    // (a) V tile → fp16, transposed and k-permuted.
    {
      const int t = tid & 31, cb = tid >> 5;  // token, 32-channel block
      const int kp = KPos(t);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 x = *reinterpret_cast<const uint4*>(&st.vc[t][cb * 32 + h * 16]);
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const int8_t c = static_cast<int8_t>((w[i >> 2] >> (8 * (i & 3))) & 0xff);
          sm.vt[cb * 32 + h * 16 + i][kp] = __int2half_rn(c);
        }
      }
    }
    __syncthreads();
    if (base >= warp_end) continue;  // every row of this warp ends before the tile

    // (b) logits: 4 column tiles of 8 tokens; c0,c1 row gid, c2,c3 row gid+8; columns
    // (2tig, 2tig+1) are tokens 8·nt + tig and 8·nt + tig + 4.
    float lg[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int brow = nt * 8 + (gid >> 1) + 4 * (gid & 1);
      const int sw = MmaSwizzle(brow);
      const uint4 c0 = *reinterpret_cast<const uint4*>(&st.kc[brow][((2 * tig) ^ sw) << 4]);
      const uint4 c1 = *reinterpret_cast<const uint4*>(&st.kc[brow][((2 * tig + 1) ^ sw) << 4]);
      int32_t acc[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
        MmaS8(acc[j], qa[j][0], c0.x, c0.y);
        MmaS8(acc[j], qa[j][1], c0.z, c0.w);
        MmaS8(acc[j], qa[j][2], c1.x, c1.y);
        MmaS8(acc[j], qa[j][3], c1.z, c1.w);
      }
      if constexpr (DITHER) {
        // The B token's dither bytes for the lane's channels [32·tig, 32·tig + 32) (groups 8·tig + i),
        // top bits flipped: e = b − 128 as int8, in the code words' order; then F_j = 512·Dm_j −
        // 2·De_j − S_j (int_digit_dot.h), combined below as the codes' D_j would be.
        const uint64_t th = sm.thash[brow];
        uint32_t ew[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) ew[i] = meter::DitherWord(th, static_cast<uint32_t>(8 * tig + i)) ^ 0x80808080u;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          int32_t de[4] = {0, 0, 0, 0};
          MmaS8(de, qa[j][0], ew[0], ew[1]);
          MmaS8(de, qa[j][1], ew[2], ew[3]);
          MmaS8(de, qa[j][2], ew[4], ew[5]);
          MmaS8(de, qa[j][3], ew[6], ew[7]);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[j][e] = meter::DitherDigitTerm(acc[j][e], de[e], dsum[j][e >> 1]);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, tok = nt * 8 + tig + 4 * (e & 1);
        const float t = meter::CombineDigitDots(acc[0][e], acc[1][e], acc[2][e], acc[3][e]);
        const float l = (t * Bf16Bits(st.ks[tok])) * lscale[r];
        lg[nt][e] = base + tok < ctx[r] ? l : -INFINITY;
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {  // η's key-scale max, over the CTA's real tokens
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tok = nt * 8 + tig + 4 * h;
        if (base + tok < cta_end) smaxk = meter::MaxAcc(smaxk, Bf16Bits(st.ks[tok]));
      }
    }
    // (c)–(e): online softmax, certificate terms, o += P·V (the int8 key columns: tokens 8·nt + tig + 4·h).
    // int8-dither: Tier B, ε̂ = min(ε, u_t) with u_t = C·s_t (the CPU's MeteredSplit, the decode kernels').
    acc.template AddTile<true, DITHER>(lg, eps_digits, st.kw, sm.vt, gid, tig, [&](int tok) {
      prefill::TokenTerms tt;
      tt.rho = tt.nu = 0.0f;
      if constexpr (METER && meter::TierBFormReadsKeyWitness(FORM)) {  // Tier A's key witness
        tt.kunit = Bf16Bits(st.ku[tok]);
      }
      if constexpr (METER) {
        tt.rho = cuda_kv::SummaryRho(st.vsum[tok]);
        tt.nu = cuda_kv::SummaryNu(st.vsum[tok]);
      }
      if constexpr (DITHER) {
        const float ks = Bf16Bits(st.ks[tok]) * (1.0f + 4.0f * meter::kUnitRoundoff);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if constexpr (FORM != meter::TierBForm::kPerToken) {
            // u_t itself (tierb 0: a zero query, u_t = 0; NaN, a bad query: ∞, vacuous)
            const float u = tierb[r] * ks;
            tt.eps_cap[r] = u >= 0.0f ? u : INFINITY;
          } else {
            tt.eps_cap[r] = tierb[r] > 0.0f ? tierb[r] * ks : INFINITY;
          }
        }
      }
      tt.sv = Bf16Bits(st.vs[tok]);
      return tt;
    });
  }
  CpAsyncWait<0>();

  // ---- η per row (IntDigitEta with the largest key scale the quad saw), the output, the certificate
  smaxk = fmaxf(smaxk, __shfl_xor_sync(0xffffffffu, smaxk, 1));
  smaxk = fmaxf(smaxk, __shfl_xor_sync(0xffffffffu, smaxk, 2));
  float eta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int v = vloc[r];
    eta[r] = !METER || rows_q.bad[r] ? INFINITY
             : DITHER              ? meter::IntDigitEtaDither(sm.q.q1[v], sm.q.qexp[v], kD, smaxk, sm.q.qscale[v])
                                   : meter::IntDigitEta(sm.q.q1[v], sm.q.qexp[v], kD, smaxk, sm.q.qscale[v]);
  }
  acc.Finish(P, rows_q, v0, warp, lane, eta);
}

}  // namespace

CudaStatus prefill::LaunchInt8(const Params& p, dim3 grid, cudaStream_t stream) {
  const size_t smem = sizeof(Smem);
  const bool dither = p.layout.scheme == KvScheme::kInt8Dither;
  using meter::TierBForm;
  const TierBForm form = dither && p.a.meter && p.a.delta_loc > 0.0 ? p.a.tier_b_form : TierBForm::kPerToken;
  auto kernel = form == TierBForm::kSplitMax    ? MeteredPrefillInt8Kernel<true, true, TierBForm::kSplitMax>
                : form == TierBForm::kScaleOnly ? MeteredPrefillInt8Kernel<true, true, TierBForm::kScaleOnly>
                : p.a.meter ? (dither ? MeteredPrefillInt8Kernel<true, true> : MeteredPrefillInt8Kernel<true, false>)
                            : (dither ? MeteredPrefillInt8Kernel<false, true> : MeteredPrefillInt8Kernel<false, false>);
  return prefill::LaunchWithSmem(kernel, smem, grid, stream, p);
}

}  // namespace witcert
