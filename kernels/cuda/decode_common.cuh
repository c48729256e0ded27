// What every metered decode kernel shares (the first kernel in metered_decode_kernel.cuh,
// the pipelined kernel, the tensor-core kernel, the gate's repair ranking): the launch
// parameters, the split range, the query band norms and Tier B coefficient, one token's ε̂
// from its witness, the witness and summary decoders, and the partial's shuffle.
#pragma once

#include <cstdint>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/kv_codec_device.cuh"
#include "kernels/cuda/metered_decode_cuda.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/partial_sum.h"
#include "kernels/meter/witness_format.h"

namespace witcert::cuda_kv {

constexpr int kThreads = 256;
constexpr int kWarps = 8;
constexpr int kTile = 128;

struct DecodeParams {
  PagedKvLayout layout;
  PagedKvLayer kv;
  const float* q;              // [batch, Hq, D]
  const int32_t* block_tables; // [batch, max_blocks]
  const int32_t* context_lens; // [batch]
  int32_t num_q_heads, q_per_kv, max_blocks, num_splits, lcap, layer;
  int32_t code_bytes, nscale;   // layout.code_bytes(), layout.scales_per_vector(false)
  int32_t bs_shift;             // log2(block_size): no 64-bit division per token
  bool overlap_previous = false;  // MeteredDecodeCudaArgs::overlap_previous: the launch, and q after the wait
  uint64_t seed;
  double delta_loc;
  float neg_log_delta = 0.0f;  // meter::TierBNegLogDelta(delta_loc), for TierBCoefficientF
  float* part_acc;             // [batch, Hq, P, D]
  meter::CertPartial* parts;   // [batch, Hq, P]
  // Promoted blocks (EXACT kernels only): slot of (physical block, layer, KV head) in the
  // exact cache, −1 when not cached; the cache holds fp32 [slots, 2 (K, V), block_size, D].
  const int32_t* exact_slot = nullptr;  // [num_blocks, num_layers, Hkv]
  const float* exact_kv = nullptr;
  int32_t num_layers = 0;
  // Outlier channel bypass (EXACT kernels only; paged_kv_cuda.h): this layer's channels and
  // their count m (0: off). A token is then decoded to stored values, the m exact ones put back.
  const int32_t* outlier_channels = nullptr;  // [Hkv, 2 (K, V), m]
  int32_t num_outliers = 0;
};


__device__ __forceinline__ meter::CertPartial ShflXorPartial(const meter::CertPartial& p, int o) {
  meter::CertPartial r;
  const unsigned f = 0xffffffffu;
  r.m = __shfl_xor_sync(f, p.m, o);
  r.z = __shfl_xor_sync(f, p.z, o);
  r.b = __shfl_xor_sync(f, p.b, o);
  r.c = __shfl_xor_sync(f, p.c, o);
  r.eps_max = __shfl_xor_sync(f, p.eps_max, o);
  r.vmax = __shfl_xor_sync(f, p.vmax, o);
  r.eta_max = __shfl_xor_sync(f, p.eta_max, o);
  r.count = __shfl_xor_sync(f, static_cast<long long>(p.count), o);
  r.chain = __shfl_xor_sync(f, static_cast<long long>(p.chain), o);
  r.merges = __shfl_xor_sync(f, p.merges, o);
  r.bad = __shfl_xor_sync(f, static_cast<int>(p.bad), o) != 0;
  return r;
}

__device__ __forceinline__ float Bf16Bits(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// The bounds w_b = c_b·U of 8 key band codes (bytes of lo, then hi, in band order) with the
// vector's unit U: meter::BandWitnessBound's exact values. A code byte becomes a float by prmt
// into the mantissa of 2^23 and one exact subtraction (ALU and FMA pipes, no conversion).
__device__ __forceinline__ void DecodeBandCodes8(uint32_t lo, uint32_t hi, float unit, float (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t bits = __byte_perm(i < 4 ? lo : hi, 0x4b000000u, 0x7650u | (i & 3));  // 2^23 + c_b
    w[i] = (__uint_as_float(bits) - 8388608.0f) * unit;
  }
}

// A value summary read as one 32-bit word (witness_format.h: word 0 ρ, word 1 ν, bf16 bits;
// little-endian, so ρ is the low half). Both exact.
__device__ __forceinline__ float SummaryRho(uint32_t s) { return __uint_as_float(s << 16); }
__device__ __forceinline__ float SummaryNu(uint32_t s) { return __uint_as_float(s & 0xffff0000u); }

// ≥ ‖scale·x‖ of one row held 8 channels per lane over LPT lanes (every lane of the warp
// calls; each lane gets the row's bound): the wide-range path for rows without a value
// summary, scaled by the row's largest |x| since fp32 squares can overflow or underflow.
// (1 + 2(D+6)u)(1 + 4u) covers the sum of squares in any order, the sqrt and both products.
template <int D, int LPT>
__device__ __forceinline__ float WideRangeRowNorm(const float (&x)[8], float scale) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
#pragma unroll
  for (int o = LPT / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float inv = (amax > 0.0f && amax <= 3.0e38f) ? 1.0f / amax : 0.0f;
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float y = x[i] * inv;
    ss = fmaf(y, y, ss);
  }
#pragma unroll
  for (int o = LPT / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float norm = inv == 0.0f ? amax : amax * sqrtf(ss);  // 0, inf or NaN: amax
  constexpr float kInfl = (1.0f + 2.0f * (D + 6) * meter::kUnitRoundoff) * (1.0f + 4.0f * meter::kUnitRoundoff);
  return norm * scale * kInfl;
}

// q·k/√d of an exact key row k ([D] fp32, global, 16-byte aligned) for the query row q (the same), a
// sequential fp32 dot, UNROLL float4 steps unrolled; with METER, *eta its η,
// EtaFactor(d)·Σ|q_c k_c|/√d (certificates.md §4). How the kernels read rows the gate promoted or a
// group-keyed scheme has not encoded yet (pipe_exact_rows.cuh, metered_prefill_kivi2.cu).
template <int D, bool METER, int UNROLL = 4>
__device__ __forceinline__ float ExactKeyLogit(const float* q, const float* k, float inv_sqrt_d, float* eta) {
  float dot = 0.0f, ad = 0.0f;
#pragma unroll UNROLL
  for (int c = 0; c < D; c += 4) {
    const float4 xv = __ldg(reinterpret_cast<const float4*>(k + c));
    const float4 qv = __ldg(reinterpret_cast<const float4*>(q + c));
    dot = fmaf(qv.w, xv.w, fmaf(qv.z, xv.z, fmaf(qv.y, xv.y, fmaf(qv.x, xv.x, dot))));
    if constexpr (METER) {
      ad = fmaf(fabsf(qv.w), fabsf(xv.w),
                fmaf(fabsf(qv.z), fabsf(xv.z), fmaf(fabsf(qv.y), fabsf(xv.y), fmaf(fabsf(qv.x), fabsf(xv.x), ad))));
    }
  }
  if constexpr (METER) *eta = meter::EtaFactor(D) * ad * inv_sqrt_d;
  return dot * inv_sqrt_d;
}

// This CTA's token range [begin, end) of sequence `seq`'s split `split` (SplitTokens: whole
// 128-token stages; the last used split takes the rest). run = false: nothing left to do —
// the split is empty (at or past SplitsUsed), or longer than the shared-memory logits
// (max_context understated by the caller), in which case its partials were written vacuous
// (bad) with NaN accumulators: never an out-of-bounds access.
struct SplitRange {
  int64_t context = 0, begin = 0, end = 0;
  bool run = false;
  // The split holds the sequence's newest token, which the kernel before may still be writing
  // when the decode overlaps it (MeteredDecodeCudaArgs::overlap_previous).
  __device__ bool HoldsNewest() const { return end == context; }
};

// Called by the tensor-core and pipelined kernels once their last K/V stage has landed: the split
// merge, a programmatic dependent launch when the decode is one, may launch now. It waits for the
// decode to finish before it reads a partial, so only its launch overlaps the reductions.
__device__ __forceinline__ void ReleaseSplitMerge() { cuda_launch::AllowNextKernelToStart(); }

template <int D>
__device__ __forceinline__ SplitRange BeginSplit(const DecodeParams& p, int seq, int split, int kvh, int tid) {
  SplitRange r;
  r.context = p.context_lens[seq];
  if (split >= SplitsUsed(r.context, p.num_splits)) return r;
  const int64_t len = SplitTokens(r.context, p.num_splits);
  r.begin = len * split;
  r.end = r.begin + len < r.context ? r.begin + len : r.context;
  if (r.end - r.begin > p.lcap) {
    cuda_launch::WaitForPreviousKernel();  // writes the workspace the previous merge may read
    const int32_t G = p.q_per_kv;
    if (tid < G) {
      meter::CertPartial v;
      v.m = 0.0f; v.z = 1.0f; v.count = 1; v.chain = 1; v.bad = true;
      const int64_t cell = (static_cast<int64_t>(seq) * p.num_q_heads + kvh * G + tid) * p.num_splits + split;
      p.parts[cell] = v;
      for (int c = 0; c < D; ++c) p.part_acc[cell * D + c] = NAN;
    }
    return r;
  }
  r.run = true;
  return r;
}

// The vector index of every 8-token group of a split's stages: gvec[i] for the tokens
// [begin_al + 8i, begin_al + 8i + 8), kGroupOutside where the group misses [begin, end) (t_lo, t_hi:
// begin and end as offsets from begin_al). A group never straddles a block (block_size ≥ 8, a
// power of 2). The pipelined kernel's loader looks groups up here, filled once per CTA, instead
// of in the block table with its range checks at every 16-byte copy (fp16 and fp8 11-13% faster,
// bench/RESULTS.md 2026-12-03). The tensor-core kernel keeps its per-call lookup: the table
// made its int8-dither meter-on kernel 2-7% slower there. Vector indices are < 2^31.
constexpr int32_t kGroupOutside = INT32_MIN;
// gexact (null: not wanted): beside gvec, the exact-block cache slot of each group's (block, layer,
// KV head), −1 where the block is not cached, there is no cache (p.exact_slot null) or the group
// is outside [begin, end); the pipelined kernel reads such groups' rows exact (pipe_exact_rows.cuh).
__device__ __forceinline__ void FillGroupVectors(const DecodeParams& p, int seq, int kvh, int32_t begin_al,
                                                 int32_t t_lo, int32_t t_hi, int32_t n_groups, int tid,
                                                 int threads, int32_t* gvec, int32_t* gexact = nullptr) {
  const int32_t* bt = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;
  const int32_t hkv = p.layout.num_kv_heads, bmask = p.layout.block_size - 1;
  for (int i = tid; i < n_groups; i += threads) {
    const int32_t t0 = 8 * i;
    int32_t v = kGroupOutside, slot = -1;
    if (t0 < t_hi && t0 + 8 > t_lo) {
      const int32_t pos = begin_al + t0;
      const int32_t blk = bt[pos >> p.bs_shift];
      v = ((blk * hkv + kvh) << p.bs_shift) + (pos & bmask);
      if (gexact != nullptr && p.exact_slot != nullptr) {
        slot = __ldg(p.exact_slot + (static_cast<int64_t>(blk) * p.num_layers + p.layer) * hkv + kvh);
      }
    }
    gvec[i] = v;
    if (gexact != nullptr) gexact[i] = slot;
  }
}

// QueryBandNorm's arithmetic over n pairs, pair(i, &x0, &x1) giving pair i's two values: max|x|,
// Σ|x|, and ‖x‖ scaled by the max so the squares cannot overflow (CPU: ScaledNorm). Σ|x| in double
// (Acc = double), or in fp32 rounded up (Acc = float: 2n non-negative terms in sequence are within
// γ_2n ≤ 2.01·n·u of the real sum while n ≤ 2^20, and the final product rounds once more, so
// ×(1 + (2n + 2)·2u) covers both; float's shorter dependency chain is what the tensor-core
// kernel's serial prologue takes).
template <class Acc, class Pair>
__device__ __forceinline__ float BandNormOfPairs(int n, Pair pair, Acc* abs_sum, float* max_abs) {
  float amax = 0.0f;
  Acc a1 = 0;
  for (int pr = 0; pr < n; ++pr) {
    float x0, x1;
    pair(pr, &x0, &x1);
    amax = fmaxf(amax, fmaxf(fabsf(x0), fabsf(x1)));
    a1 += fabs(static_cast<Acc>(x0)) + fabs(static_cast<Acc>(x1));
  }
  if constexpr (sizeof(Acc) == sizeof(float)) a1 *= 1.0f + static_cast<float>(4 * n + 4) * meter::kUnitRoundoff;
  *abs_sum = a1;
  if (max_abs != nullptr) *max_abs = amax;
  float norm = amax;
  if (amax > 0.0f && amax <= 3.0e38f) {
    const float inv = 1.0f / amax;
    float s = 0.0f;
    for (int pr = 0; pr < n; ++pr) {
      float x0, x1;
      pair(pr, &x0, &x1);
      const float y0 = x0 * inv, y1 = x1 * inv;
      s += y0 * y0;
      s += y1 * y1;
    }
    norm = amax * sqrtf(s);
  }
  return norm;
}

// The band's 2·PPB values for PPB pairs per band known at compile time, loaded at once (float4;
// `qg` 16-byte aligned) before any arithmetic, instead of one dependent load per pair and again
// for the squares (ncu / clock64: the meter's prologue was most of its cost at batch 1,
// bench/RESULTS.md sixteenth session): v[2pr], v[2pr + 1] = pair pr.
template <int D, int PPB>
__device__ __forceinline__ void LoadBandPairs(const float* qg, int b, bool interleaved, float (&v)[2 * PPB]) {
  constexpr int half = D / 2;
  static_assert(PPB % 4 == 0, "float4 loads");
  if (interleaved) {
    const float4* src = reinterpret_cast<const float4*>(qg + 2 * b * PPB);
#pragma unroll
    for (int i = 0; i < PPB / 2; ++i) {
      const float4 x = src[i];
      v[4 * i] = x.x; v[4 * i + 1] = x.y; v[4 * i + 2] = x.z; v[4 * i + 3] = x.w;
    }
  } else {
    const float4* lo = reinterpret_cast<const float4*>(qg + b * PPB);
    const float4* hi = reinterpret_cast<const float4*>(qg + half + b * PPB);
#pragma unroll
    for (int i = 0; i < PPB / 4; ++i) {
      const float4 x = lo[i], y = hi[i];
      v[8 * i] = x.x; v[8 * i + 1] = y.x; v[8 * i + 2] = x.y; v[8 * i + 3] = y.y;
      v[8 * i + 4] = x.z; v[8 * i + 5] = y.z; v[8 * i + 6] = x.w; v[8 * i + 7] = y.w;
    }
  }
}

// ‖q_b‖ of band b of query `qg` [D] under the band map (CPU: QueryBandNorms), scaled so the
// squares cannot overflow; *abs_sum = Σ|q_c| over the band in double (Tier B's ‖q‖₁) and, where
// asked, *max_abs = max|q_c| over the band (NaN ignored).
template <int D, class Acc>
__device__ __forceinline__ float QueryBandNorm(const float* qg, int b, int nb, bool interleaved, Acc* abs_sum,
                                               float* max_abs = nullptr) {
  const int half = D / 2, ppb = half / nb;
  if constexpr (D % 64 == 0) {  // B = D/16 (8 at d = 128): 8 pairs a band, loaded at once
    if (ppb == 8 && (reinterpret_cast<uintptr_t>(qg) & 15) == 0) {
      float v[16];
      LoadBandPairs<D, 8>(qg, b, interleaved, v);
      return BandNormOfPairs(8, [&](int pr, float* x0, float* x1) { *x0 = v[2 * pr]; *x1 = v[2 * pr + 1]; },
                             abs_sum, max_abs);
    }
  }
  return BandNormOfPairs(
      ppb,
      [&](int i, float* x0, float* x1) {
        const int pr = b * ppb + i;
        *x0 = qg[interleaved ? 2 * pr : pr];
        *x1 = qg[interleaved ? 2 * pr + 1 : pr + half];
      },
      abs_sum, max_abs);
}

// The meter's query prologue (CPU: PrepareMeteredQuery), shared by the decode kernels: the band
// norms ‖q_b‖ and, for Tier B (ABS_SUMS), per-band Σ|q_c| of the G query heads into sm.qbn /
// sm.q1, by `threads` threads.
template <int D, bool ABS_SUMS = true, class Smem>
__device__ __forceinline__ void QueryBandPrologue(const DecodeParams& p, int seq, int h0, int G, int nb, int tid,
                                                  int threads, Smem& sm) {
  for (int gi = tid; gi < G * nb; gi += threads) {
    const int g = gi / nb, b = gi % nb;
    const float* qg = p.q + (static_cast<int64_t>(seq) * p.num_q_heads + h0 + g) * D;
    double a1 = 0.0;  // without ABS_SUMS unused: its double sums are dead code
    const float norm = QueryBandNorm<D>(qg, b, nb, p.layout.interleaved, &a1);
    sm.qbn[g][b] = norm;
    if constexpr (ABS_SUMS) sm.q1[g][b] = a1;
  }
}

// ‖q‖₂ rounded up from a head's band norms `qbn` [nb] (each ≤ (d/B+5)u off, the combination
// ≤ (B+3)u more), for the Tier B coefficient.
template <int D>
__device__ __forceinline__ float QueryNormFromBands(const float* qbn, int nb) {
  float s2 = 0.0f;
  for (int b = 0; b < nb; ++b) s2 += qbn[b] * qbn[b];
  return sqrtf(s2) * (1.0f + 4.0f * (D + nb + 8) * meter::kUnitRoundoff);
}

// A head's Tier B coefficient from its band norms `qbn` [nb] (after a barrier) and ‖q‖₁ (n1),
// 0 when δ_loc ≤ 0: ‖q‖₂ by QueryNormFromBands and ‖q‖₁ rounded up.
template <int D>
__device__ __forceinline__ float TierBCoefficientFromNorms(const float* qbn, int nb, double n1, int64_t context,
                                                           double delta_loc) {
  if (!(delta_loc > 0.0)) return 0.0f;
  return meter::TierBCoefficient(QueryNormFromBands<D>(qbn, nb), meter::RoundUpToFloat(n1 * (1.0 + 1e-6)), D,
                                 context, delta_loc);
}

// The same in fp32 (meter::TierBCoefficientF) from an upper bound n1 on ‖q‖₁ and −ln δ rounded up
// (DecodeParams::neg_log_delta): the tensor-core kernel's prologue.
template <int D>
__device__ __forceinline__ float TierBCoefficientFromNormsF(const float* qbn, int nb, float n1, int64_t context,
                                                            double delta_loc, float neg_log_delta) {
  if (!(delta_loc > 0.0)) return 0.0f;
  return meter::TierBCoefficientF(QueryNormFromBands<D>(qbn, nb), n1, D, context, neg_log_delta);
}

// Head g's Tier B coefficient from the prologue's band sums, 0 when the codec is not Tier B.
template <int D, bool TIER_B, class Smem>
__device__ __forceinline__ float TierBCoefficientOfHead(const Smem& sm, int g, int nb, int64_t context,
                                                        double delta_loc) {
  if (!TIER_B) return 0.0f;
  double n1 = 0.0;
  for (int b = 0; b < nb; ++b) n1 += sm.q1[g][b];
  return TierBCoefficientFromNorms<D>(sm.qbn[g], nb, n1, context, delta_loc);
}

// ε̂ of one token for one query head (CPU: MeteredSplit) from its key band witness: `codes`
// [nb] and `unit` (PagedKvLayer::k_witness / k_witness_unit at the token's vector), read only
// when has_w. NB = 8 reads the codes as one 8-byte load.
template <int NB>
__device__ __forceinline__ float TokenEpsilon(const uint8_t* codes, const uint16_t* unit, int32_t nb,
                                              const float* qbn, float inv_sqrt_d, float infl, bool has_w,
                                              float tierb, float kscale) {
  float e = 0.0f;
  if (has_w) {
    const float u = Bf16Bits(__ldg(unit));
    if constexpr (NB == 8) {
      const uint2 raw = __ldg(reinterpret_cast<const uint2*>(codes));
      float w[8];
      DecodeBandCodes8(raw.x, raw.y, u, w);
      e = meter::TierAEpsilon(qbn, w, 8, inv_sqrt_d, infl);
    } else {
      float w[64];
      for (int b = 0; b < nb; ++b) w[b] = meter::BandWitnessBound(__ldg(codes + b), u);
      e = meter::TierAEpsilon(qbn, w, nb, inv_sqrt_d, infl);
    }
  }
  if (tierb > 0.0f) {
    float u = tierb * kscale * (1.0f + 4 * meter::kUnitRoundoff);
    e = has_w ? fminf(e, u) : u;
  }
  return e;
}

}  // namespace witcert::cuda_kv
