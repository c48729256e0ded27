// What the chunked-prefill kernels share: a thread's two query rows (gid and gid + 8 of its warp's
// 16 vectors) — for the 16-bit tensor-core logits (metered_prefill_float.cu: fp16, bf16, fp8-e4m3;
// metered_prefill_kivi2.cu) their query digits, band norms and context — and, for every kernel
// (int8-rtn's too), the CTA's token span, the witness loads and the rows' running sums: the online
// softmax, the certificate terms, p·v, and the final output and certificate.
//
// Layouts (mma.m16n8k16, ops/mma_f16.cuh): the logits of a 32-token tile are lg[nt][e], n-tile
// nt's C element e: row gid (e < 2) or gid + 8, token 8·nt + 2·tig + (e & 1) in natural order,
// so two n-tiles' C fragments are one PV A fragment, and the V tile is [channel, token] fp16.
// The rescale argument (one rounded exponential per rescale = one merge of cert_math.h's
// SumInflation) is metered_prefill_int8.cu's; it covers the common tokens' power sums, rescaled by
// the same factor, as it covers b.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/f16_digits.cuh"
#include "kernels/cuda/metered_prefill_launch.h"
#include "kernels/cuda/mma_head_sums.cuh"
#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/tier_a_digits.cuh"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/tier_b_form.h"

namespace witcert::prefill {

constexpr int kVPitch = kTile + 8;  // halves per channel row of the transposed V tile

// x·f for a running certificate sum; an infinite sum (a vacuous term, ε̂ > kEpsCap) stays
// infinite even when f underflows to 0, where inf·0 would turn the bound into NaN.
__device__ __forceinline__ float RescaleSum(float x, float f) { return x == INFINITY ? x : x * f; }

// A 16-bit value (fp16 / bf16 bits in the low half) as fp32, exact.
template <bool BF16>
__device__ __forceinline__ float HalfBitsToFloat(uint32_t h) {
  if constexpr (BF16) {
    return __uint_as_float(h << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
  }
}

// fl↑(|hi| + |lo|) of a digit pair in its format: ≥ |hi| + |lo| (an fp32 sum rounded up, then a
// conversion rounded up), as 16 bits.
template <bool BF16>
__device__ __forceinline__ uint32_t DigitAbsUp(uint32_t pair) {
  const float s = __fadd_ru(fabsf(HalfBitsToFloat<BF16>(pair & 0xffffu)), fabsf(HalfBitsToFloat<BF16>(pair >> 16)));
  if constexpr (BF16) {
    return __bfloat16_as_ushort(__float2bfloat16_ru(s));
  } else {
    return __half_as_ushort(__float2half_ru(s));
  }
}

// The thread's two rows r = 0, 1 (vectors warp·16 + gid + 8r of the CTA). Each vector's query is
// x = q·2^s (s puts max|x_c| below 2^14) as two digits of the format, hi + lo (f16_digits.cuh),
// and with ABS a third, fl↑(|hi| + |lo|) digit-wise: A fragments [k-step][register] of channels
// 16·ks + 2·tig + {0, 1} (registers 0, 1: rows gid, gid + 8) and + 8 (registers 2, 3), read by
// Frag(digit, ks). With SMEM_DIGITS only hi stays in registers (qa); the other digits go to the
// warp's shared array `sdig` ([digit − 1][ks][lane], a lane's four registers as one uint4: one
// conflict-free 16-byte load per fragment), for kernels whose registers would otherwise spill.
// unscale = fl(2^-s·fl(1/√d)), as the decode kernel's TcQueryFragments. A non-finite query sets bad.
template <bool BF16, bool ABS, bool METER, bool SMEM_DIGITS>
struct QueryRows {
  static constexpr int kDigits = ABS ? 3 : 2;
  static constexpr int kRegDigits = SMEM_DIGITS ? 1 : kDigits;
  static constexpr int kSmemDigits = kDigits - kRegDigits;  // uint4 [kSmemDigits][8][32] per warp
  int64_t ctx[2];        // tokens the row's vector sees (0: not a vector of the chunk)
  float qbn[2][kBands];  // ‖q_b‖ (meter)
  float unscale[2];
  bool bad[2];
  uint32_t qa[kRegDigits][8][4];
  uint4* sdig;

  __device__ __forceinline__ void Frag(int dg, int ks, uint32_t (&f)[4]) const {
    if (dg < kRegDigits) {
#pragma unroll
      for (int i = 0; i < 4; ++i) f[i] = qa[dg < kRegDigits ? dg : 0][ks][i];
    } else {
      const uint4 v = sdig[((dg - kRegDigits) * 8 + ks) * 32 + (threadIdx.x & 31)];
      f[0] = v.x;
      f[1] = v.y;
      f[2] = v.z;
      f[3] = v.w;
    }
  }

  // warp_digits: this warp's uint4 [kSmemDigits][8][32] (unused without SMEM_DIGITS).
  __device__ __forceinline__ void Load(const Params& P, int64_t v0, int warp, int gid, int tig, float inv_sqrt_d,
                                       uint4* warp_digits) {
    using Digits = cuda_kv::DigitFormat<BF16>;
    const MeteredPrefillCudaArgs& a = P.a;
    const int G = P.group;
    const int64_t nvec = a.num_rows * G;
    const int kvh = blockIdx.y;
    sdig = warp_digits;
    uint32_t* sword = reinterpret_cast<uint32_t*>(warp_digits);
    const int lane = threadIdx.x & 31;
    auto put = [&](int dg, int ks, int i, uint32_t x) {
      if (dg < kRegDigits) {
        qa[dg < kRegDigits ? dg : 0][ks][i] = x;
      } else {
        sword[(((dg - kRegDigits) * 8 + ks) * 32 + lane) * 4 + i] = x;
      }
    };
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t gv = v0 + warp * 16 + gid + 8 * r;
      const bool live = gv < nvec;
      ctx[r] = live ? a.start_pos + gv / G + 1 : 0;
      const int head = static_cast<int>(kvh * G + (live ? gv % G : 0));
      const float* q = a.q + (live ? gv / G : 0) * a.q_stride + static_cast<int64_t>(head) * kD;
      float2 qv[8][2];
      float amax = 0.0f;
      bool nonfinite = false;  // fmaxf drops NaN: tested on its own
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          qv[ks][h] = live ? *reinterpret_cast<const float2*>(q + 16 * ks + 8 * h + 2 * tig) : make_float2(0.0f, 0.0f);
          amax = fmaxf(amax, fmaxf(fabsf(qv[ks][h].x), fabsf(qv[ks][h].y)));
          nonfinite = nonfinite || !(fabsf(qv[ks][h].x) <= 3.0e38f) || !(fabsf(qv[ks][h].y) <= 3.0e38f);
        }
      }
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      nonfinite = __shfl_xor_sync(0xffffffffu, nonfinite, 1) || nonfinite;
      nonfinite = __shfl_xor_sync(0xffffffffu, nonfinite, 2) || nonfinite;
      bad[r] = nonfinite;
      int e = 0;
      if (amax > 0.0f && amax <= 3.0e38f) frexpf(amax, &e);  // amax < 2^e
      e = max(e, -100);
      const float scale = ldexpf(1.0f, 14 - e);
      unscale[r] = (1.0f / scale) * inv_sqrt_d;
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t dx = Digits::Pair(qv[ks][h].x * scale), dy = Digits::Pair(qv[ks][h].y * scale);
          put(0, ks, 2 * h + r, (dx & 0xffffu) | (dy << 16));
          put(1, ks, 2 * h + r, (dx >> 16) | (dy & 0xffff0000u));
          if constexpr (ABS) put(2, ks, 2 * h + r, DigitAbsUp<BF16>(dx) | (DigitAbsUp<BF16>(dy) << 16));
        }
      }
      if constexpr (METER) {
#pragma unroll
        for (int b = 0; b < kBands; ++b) {
          double unused = 0.0;
          qbn[r][b] = live ? cuda_kv::QueryBandNorm<kD>(q, b, kBands, P.layout.interleaved, &unused) : 0.0f;
        }
      }
    }
    if constexpr (kSmemDigits > 0) __syncwarp();  // the warp's digits, written lane by lane, read as uint4
  }
};

// The tokens a CTA reads: up to its last live row's context (end), in kTile-token tiles; a warp's
// own limit (warp_end) lets it skip the compute of tiles past all of its rows. ctx: the thread's
// two rows' contexts (QueryRows::ctx); every lane of the warp calls.
struct CtaSpan {
  int64_t end, warp_end;
  int num_tiles;
  __device__ __forceinline__ CtaSpan(const Params& P, int64_t v0, const int64_t (&ctx)[2]) {
    const int64_t last_vec = min(v0 + kVecs, P.a.num_rows * P.group) - 1;
    end = P.a.start_pos + last_vec / P.group + 1;
    warp_end = max(ctx[0], ctx[1]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) warp_end = max(warp_end, __shfl_xor_sync(0xffffffffu, warp_end, o));
    num_tiles = static_cast<int>((end + kTile - 1) / kTile);
  }
};

// Tile k's token ld_t (the loaders' thread (token, part) split): whether the CTA reads it, and then
// its vector index in the pool (0 otherwise, a safe address for cp.async's zero fill).
__device__ __forceinline__ bool TileTokenVector(const Params& P, int k, int ld_t, int64_t cta_end, int64_t* vec) {
  const int64_t pos = static_cast<int64_t>(k) * kTile + ld_t;
  *vec = 0;
  if (pos >= cta_end) return false;
  const int32_t blk = P.a.block_table[pos >> P.bs_shift];
  *vec = ((static_cast<int64_t>(blk) * P.layout.num_kv_heads + blockIdx.y) << P.bs_shift) +
         (pos & (P.layout.block_size - 1));
  return true;
}

// Launches a prefill kernel with `smem` bytes of dynamic shared memory (the kernels' Smem).
template <class Kernel>
CudaStatus LaunchWithSmem(Kernel kernel, size_t smem, dim3 grid, cudaStream_t stream, const Params& p) {
  WITCERT_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(p);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

// The meter's witnesses of tile token ld_t (vector `vec`, `ok`: a token the CTA reads; cp.async
// zero-fills otherwise), by loader part ld_p, each from the first token of its 16-byte run (runs
// never cross a block: block_size ≥ 8): K band codes of 2 tokens (part 0), value summaries of 4 and
// K band units of 8 (part 1).
// KEY_WITNESS false (Tier B's scale-only and split-max forms): the value summaries only.
template <bool KEY_WITNESS = true>
__device__ __forceinline__ void IssueWitnesses(uint8_t (*kw)[kBands], uint16_t* ku, uint32_t* vsum,
                                               const PagedKvLayer& kv, int64_t vec, int ld_t, int ld_p, bool ok) {
  if (KEY_WITNESS && ld_p == 0 && (ld_t & 1) == 0) cuda_copy::CpAsync16(kw[ld_t], kv.k_witness + vec * kBands, ok);
  if (ld_p == 1 && (ld_t & 3) == 0) cuda_copy::CpAsync16(&vsum[ld_t], kv.v_summary + vec * 2, ok);
  if (KEY_WITNESS && ld_p == 1 && (ld_t & 7) == 0) cuda_copy::CpAsync16(&ku[ld_t], kv.k_witness_unit + vec, ok);
}

// The bf16 K and V scales of tile token ld_t (scaled schemes), by loader parts 2 (K) and 3 (V), one
// 16-byte chunk per 8 tokens (a group never crosses a block: block_size ≥ 8).
__device__ __forceinline__ void IssueScales(uint16_t* ks, uint16_t* vs, const PagedKvLayer& kv, int64_t vec, int ld_t,
                                            int ld_p, bool ok) {
  if ((ld_t & 7) == 0 && ld_p >= 2) {
    cuda_copy::CpAsync16(ld_p == 2 ? &ks[ld_t] : &vs[ld_t], (ld_p == 2 ? kv.k_scales : kv.v_scales) + vec, ok);
  }
}

// What the certificate needs of one token (meter only): the unit U of its key band codes c_b (the
// band bounds are c_b·U; the codes themselves reach AddTile as the tile's band code array), ρ and
// ν ≥ ‖ṽ‖ + ρ; and the V scale the weight is multiplied by before p·v (1 when the values carry
// their own).
struct TokenTerms {
  float kunit;       // U; 0: ε̂ = 0 whatever the codes
  float rho, nu, sv;
  float eps_cap[2];  // EPS_CAP only: ε̂ ≤ this per row (int8-dither's Tier B u_t)
  // Tier A reads nothing: an exact row (ε̂ = 0).
  __device__ __forceinline__ void SetExactKey() { kunit = 0.0f; }
};

// Tier A's band factors f_b = ‖q_b‖/√d·EpsInflation of the thread's two rows as 16-bit digits
// rounded up, with their scales (tier_a_digits.cuh), as the tensor-core A fragments of the warp's 16
// rows: a tile's Σ_b q'_b·c_b for every (row, token) of the thread are two MMAs per 8 tokens
// (TierABandSumsMma), then two products rounded up, TierAEpsilonOfDigits's value bit for bit, where
// the dp2a form took four dp2a and a conversion per (row, token).
struct RowEpsDigits {
  cuda_kv::BandDigitFragments frag;
  float scale[2];
  __device__ __forceinline__ void From(const float (&qbn)[2][kBands], float inv_sqrt_d, int tig) {
    const float infl = meter::EpsInflation(kD, kBands);
    uint32_t q[2][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float f[kBands];
#pragma unroll
      for (int b = 0; b < kBands; ++b) f[b] = (qbn[r][b] * inv_sqrt_d) * infl;
      cuda_kv::BandFactorDigits8(f, q[r], &scale[r]);
    }
    frag.From(q[0], q[1], tig);
  }
};

// The thread's two rows' running state: output accumulators o [channel tile][C element] (rows
// gid / gid + 8, channels 8·ct + 2·tig + {0, 1}), online max m, the certificate sums.
// FORM (int8-dither's Tier B, meter::TierBForm; per-token for every other scheme): scale-only
// takes ε̂_t = u_t = TokenTerms::eps_cap alone, without Tier A's witness. Split-max
// (meter::SetSplitMaxSums) takes a row's whole context as one split: AddTile keeps the running
// maxima of u_t and ρ_t instead of per-token A − 1 and value terms, and Finish sets b and c from
// them and the row's z.
template <bool METER, meter::TierBForm FORM = meter::TierBForm::kPerToken>
struct RowSums {
  static_assert(FORM == meter::TierBForm::kPerToken || METER, "Tier B's forms are meter forms");
  static constexpr bool SPLIT_MAX = FORM == meter::TierBForm::kSplitMax;
  float o[16][4];
  cuda_kv::MmaHeadSums sums[2];
  // The common tokens' A−1 terms (meter::WeightedTokenIsCommonAtGap: a finite logit, ε̂ ≤ ½, a
  // direct weight) as power sums (meter::EpsPowerSums), added branch-free and folded into b at the
  // end (FoldPowerSums), as the tensor-core decode kernel does; the other tokens take Add.
  meter::EpsPowerSums ps[2];
  int32_t count[2];  // tokens summed per row (a non-finite logit's row is bad anyway)
  float m[2];
  float vmax[2];
  int32_t rescales[2];
  float eps_hi[2], rho_hi[2];  // SPLIT_MAX: the row's largest u_t and ρ_t so far

  __device__ __forceinline__ void Init() {
#pragma unroll
    for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      count[r] = 0;
      m[r] = -INFINITY;
      vmax[r] = 0.0f;
      rescales[r] = 0;
      eps_hi[r] = rho_hi[r] = 0.0f;
    }
  }

  // One tile: the online max per row (the quad shares it), a rescale on a new maximum; then each
  // token's weight, its certificate terms (terms(tok) → TokenTerms) and o += P·V over the V tile
  // vt [channel][kVPitch]. C element (row, 2·tig + h) of n-tile nt is tile token 8·nt + 2·tig + h
  // (natural order), or with INT8_COLUMNS 8·nt + tig + 4·h (the int8 kernel's key layout; its V
  // tile is stored in the matching k order). kw: the tile's key band codes [kTile][kBands] (Tier A;
  // unread where FORM reads no key witness). EPS_CAP: ε̂ = min(Tier A's, TokenTerms::eps_cap[r]),
  // or eps_cap alone where FORM reads no key witness.
  template <bool INT8_COLUMNS = false, bool EPS_CAP = false, class Terms>
  __device__ __forceinline__ void AddTile(const float (&lg)[4][4], const RowEpsDigits& eps_digits,
                                          const uint8_t (*kw)[kBands], const __half (*vt)[kVPitch], int gid, int tig,
                                          Terms&& terms) {
    constexpr bool kTierA = METER && meter::TierBFormReadsKeyWitness(FORM);  // per-token ε from the band codes
    float scale_row[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tmax = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) tmax = fmaxf(tmax, fmaxf(lg[nt][2 * r], lg[nt][2 * r + 1]));
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
      scale_row[r] = 1.0f;
      if (tmax > m[r]) {
        if (m[r] > -INFINITY) {
          const float f = expf(m[r] - tmax);  // may underflow to 0 for a jump > 104
          sums[r].z *= f;
          sums[r].b = RescaleSum(sums[r].b, f);
          sums[r].c = RescaleSum(sums[r].c, f);
          // The power sums are finite (common tokens only): one product each, like b's.
          ps[r].s1 *= f;
          ps[r].s2 *= f;
          ps[r].s3 *= f;
          scale_row[r] = f;
          ++rescales[r];
        }
        m[r] = tmax;
      }
    }
    if (scale_row[0] != 1.0f || scale_row[1] != 1.0f) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        o[i][0] *= scale_row[0];
        o[i][1] *= scale_row[0];
        o[i][2] *= scale_row[1];
        o[i][3] *= scale_row[1];
      }
    }
    uint32_t pa[2][4];  // PV A fragments of the two 16-token k-steps
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      // Tier A's Σ_b q'_b·c_b of the n-tile's (row, token) C elements, exact then rounded up: two
      // MMAs, B column gid being the token C column gid holds.
      float band_sums[4];
      if constexpr (kTierA) {
        const int tb = INT8_COLUMNS ? nt * 8 + (gid >> 1) + 4 * (gid & 1) : nt * 8 + gid;
        const uint32_t codes = *reinterpret_cast<const uint16_t*>(&kw[tb][2 * tig]);
        cuda_kv::TierABandSumsMma(eps_digits.frag, cuda_kv::BandCodePairToF16x2(codes), band_sums);
      }
      float pw[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the thread's two tokens of this n-tile
        const TokenTerms tt = terms(INT8_COLUMNS ? nt * 8 + tig + 4 * h : nt * 8 + 2 * tig + h);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = 2 * r + h;
          const float l = lg[nt][e];
          float w = 0.0f;
          if (l > -INFINITY) {
            w = expf(l - m[r]);
            if constexpr (SPLIT_MAX) {
              static_assert(EPS_CAP, "Tier B's forms take u_t from eps_cap");
              if (!(fabsf(l) <= 3.0e38f)) sums[r].bad = true;  // as Add marks it
              sums[r].z += w;
              eps_hi[r] = meter::MaxAcc(eps_hi[r], tt.eps_cap[r]);
              rho_hi[r] = meter::MaxAcc(rho_hi[r], tt.rho);
              vmax[r] = meter::MaxAcc(vmax[r], tt.nu);
            } else if constexpr (METER) {
              float eps;
              if constexpr (meter::TierBFormReadsKeyWitness(FORM)) {
                eps = __fmul_ru(__fmul_ru(band_sums[e], tt.kunit), eps_digits.scale[r]);
                if constexpr (EPS_CAP) eps = fminf(eps, tt.eps_cap[r]);
              } else {
                static_assert(EPS_CAP, "Tier B's forms take u_t from eps_cap");
                eps = tt.eps_cap[r];
              }
              if (meter::WeightedTokenIsCommonAtGap(l, l - m[r], eps)) {
                sums[r].AddCommonPowers(true, w, eps, tt.rho, &ps[r]);
              } else {
                sums[r].Add(l, w, m[r], eps, tt.rho);
              }
              vmax[r] = meter::MaxAcc(vmax[r], tt.nu);
            } else {
              sums[r].z += w;
            }
            count[r] += 1;
          } else if (!(l == l)) {
            sums[r].bad = true;  // a NaN logit: the certificate is vacuous
          }
          pw[e] = w > 0.0f ? w * tt.sv : 0.0f;  // a masked slot's scale may be garbage
        }
      }
      // a0/a2: row gid (k-step nt/2, half nt%2); a1/a3: row gid + 8.
      pa[nt >> 1][(nt & 1) * 2 + 0] = mma::PackHalf2(pw[0], pw[1]);
      pa[nt >> 1][(nt & 1) * 2 + 1] = mma::PackHalf2(pw[2], pw[3]);
    }
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
      for (int ct = 0; ct < 16; ++ct) {
        const __half* vrow = &vt[ct * 8 + gid][kk * 16];
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(vrow + 2 * tig);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(vrow + 8 + 2 * tig);
        mma::MmaF16F32(o[ct], pa[kk], b0, b1);
      }
    }
  }

  // The quad's sums, then each live row's output and (meter) certificate with logit bound eta[r].
  // Every lane of the warp calls.
  template <class Rows>
  __device__ __forceinline__ void Finish(const Params& P, const Rows& rows, int64_t v0, int warp, int lane,
                                         const float (&eta)[2]) {
    const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      constexpr bool kTokenSums = METER && !SPLIT_MAX;
      if constexpr (kTokenSums) sums[r].FoldPowerSums(ps[r]);  // before the quad's sums meet
      sums[r].template AddShfl<kTokenSums>(1);
      sums[r].template AddShfl<kTokenSums>(2);
      if constexpr (SPLIT_MAX) {  // maxima of values in [0, ∞]: fmaxf is exact
        eps_hi[r] = fmaxf(eps_hi[r], __shfl_xor_sync(0xffffffffu, eps_hi[r], 1));
        eps_hi[r] = fmaxf(eps_hi[r], __shfl_xor_sync(0xffffffffu, eps_hi[r], 2));
        rho_hi[r] = fmaxf(rho_hi[r], __shfl_xor_sync(0xffffffffu, rho_hi[r], 1));
        rho_hi[r] = fmaxf(rho_hi[r], __shfl_xor_sync(0xffffffffu, rho_hi[r], 2));
      }
      count[r] += __shfl_xor_sync(0xffffffffu, count[r], 1);
      count[r] += __shfl_xor_sync(0xffffffffu, count[r], 2);
      sums[r].bad = cuda_kv::MmaHeadSums::BadOf(sums[r].bad, 0xfu << (lane & ~3));
      vmax[r] = fmaxf(vmax[r], __shfl_xor_sync(0xffffffffu, vmax[r], 1));
      vmax[r] = fmaxf(vmax[r], __shfl_xor_sync(0xffffffffu, vmax[r], 2));
    }
    const MeteredPrefillCudaArgs& a = P.a;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (rows.ctx[r] == 0) continue;
      const int64_t gv = v0 + warp * 16 + gid + 8 * r;
      const int64_t row = gv / P.group;
      const int head = static_cast<int>(blockIdx.y * P.group + gv % P.group);
      const float inv_z = 1.0f / sums[r].z;
      float* out = a.out + row * a.out_stride + static_cast<int64_t>(head) * kD;
#pragma unroll
      for (int ct = 0; ct < 16; ++ct) {
        const float2 val = make_float2(o[ct][2 * r] * inv_z, o[ct][2 * r + 1] * inv_z);
        *reinterpret_cast<float2*>(&out[ct * 8 + 2 * tig]) = val;
      }
      if (METER && tig == 0) {
        meter::CertPartial c = sums[r].ToPartial(m[r], count[r]);
        c.merges = rescales[r];
        c.vmax = vmax[r];
        c.eta_max = eta[r];
        if (SPLIT_MAX && !c.bad && c.count > 0) meter::SetSplitMaxSums(&c, eps_hi[r], rho_hi[r]);
        if (rows.bad[r]) {
          c.eta_max = INFINITY;
          c.bad = true;
        }
        a.cert[row * a.cert_row_stride + head] = meter::FinalizeCert(c, 1);
      }
    }
  }
};

}  // namespace witcert::prefill
