// The FIRST fused metered split-KV decode kernel, templated on the device codec
// (kv_codec_device.cuh), head dim, GQA group bound and the meter flag. The default is now the
// pipelined kernel (metered_decode_pipelined.cuh); this one stays as the comparison baseline
// and the fallback (MeteredDecodeCudaArgs::kernel = 1, block_size < 8). What it shares with
// the other kernels (DecodeParams, the split range, the query prologue, ε̂) is in
// decode_common.cuh.
//
// CTA = 256 threads = 8 warps, one (sequence, KV head, split). Thread mapping for K/V reads:
// a token's vector is read by LPT = D/8 lanes, 8 channels each (one load of C::kBytes), so
// a warp reads TPW = 32/LPT consecutive tokens of one block per instruction, coalesced.
// Tokens are walked in tiles of 128: pass 1 (K) stores logits for the whole split in shared
// memory; pass 2 per tile (a) weights w = e^{ℓ̂−m}, (b) V read: output accumulators, and ‖ṽ‖
// of the rows without a value summary only, (c) meter: ε̂ (Tier A band witness, Tier B scale),
// ρ and ν from the value summary (kernels/meter/witness_format.h), PartialAddToken — one thread
// per (query head, token), each thread holding one CertPartial, summed with
// SumPartialsSameMax. η: see kernels/cuda/metered_decode_cuda.cu.
// A stored row's vmax candidate is its summary's ν ≥ ‖ṽ‖ + ρ (no per-token norm). A row without
// a summary — an exact scheme's, or an exact copy (EXACT) — has ρ = 0 and its own ‖ṽ‖, computed
// in (b) by the wide-range path (fp32 squares can overflow or underflow).
// EXACT (the gate's repair path): a token whose (block, layer, KV head) has a slot in the exact
// block cache (DecodeParams::exact_slot) is read from there as fp32 K/V and contributes
// ε̂ = 0, ρ = 0 and its own ‖ṽ‖ (certificates.md §6). Only this kernel reads promoted blocks;
// the engine routes rows with promoted blocks here. It is also the kernel of the outlier
// channel bypass: every other token is decoded to its stored values with the exact outlier
// values put back (scale 1), and keeps its witnesses (the write path computed them on those
// very values: ν covers their norm).
#pragma once

#pragma once

#include <cstdint>

#include "kernels/cuda/decode_common.cuh"

namespace witcert::cuda_kv {

// The lane's 8 channels [ch0, ch0+8) in the (KV head, side)'s ascending outlier list: bit i of
// `mask` set when channel ch0+i is listed; listed channels of one lane are consecutive in the
// list, from index `base` on (EXACT kernels with outlier channels on). Two registers a side.
struct LaneOutliers {
  uint32_t mask = 0;
  int32_t base = 0;
};
__device__ __forceinline__ LaneOutliers FindLaneOutliers(const DecodeParams& p, int kvh, bool is_value, int ch0) {
  LaneOutliers r;
  const int32_t m = p.num_outliers;
  const int32_t* ch = p.outlier_channels + (kvh * 2 + (is_value ? 1 : 0)) * m;
  for (int32_t j = 0; j < m; ++j) {
    const int32_t c = __ldg(ch + j) - ch0;
    if (c < 0) ++r.base;
    if (c >= 0 && c < 8) r.mask |= 1u << c;
  }
  return r;
}

// Pool vector index of token t of the sequence whose block table is `bt` (KV head kvh).
__device__ __forceinline__ int64_t TokenVector(const DecodeParams& p, const int32_t* bt, int64_t t, int kvh) {
  const int64_t blk = bt[static_cast<int32_t>(t) >> p.bs_shift];
  return ((blk * p.layout.num_kv_heads + kvh) << p.bs_shift) + (static_cast<int32_t>(t) & (p.layout.block_size - 1));
}

// The lane's channels [ch0, ch0 + 8) of token t's exact row in its promoted block's slot (K or
// V): exact_kv [slots, 2 (K, V), block_size, d] fp32.
template <int D>
__device__ __forceinline__ void LoadExactRow8(const DecodeParams& p, int32_t slot, bool is_value, int64_t t,
                                              int32_t bs, int ch0, float (&x)[8]) {
  const float4* src = reinterpret_cast<const float4*>(
      p.exact_kv + ((static_cast<int64_t>(slot) * 2 + (is_value ? 1 : 0)) * bs + (static_cast<int32_t>(t) & (bs - 1))) * D +
      ch0);
  const float4 a = __ldg(src), b = __ldg(src + 1);
  x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
  x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
}

// An outlier-bypass token in stored values: x (code domain, scale sc) becomes fl(x·sc) — the
// stored k̃ / ṽ bit for bit, as the codec's decode computes it — with the lane's outlier
// channels replaced by their exact values `ov` [m]; the caller then uses scale 1.
__device__ __forceinline__ void ToStoredWithOutliers(float (&x)[8], float sc, const LaneOutliers& lo,
                                                     const float* ov) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    x[i] = (lo.mask >> i) & 1u ? __ldg(ov + lo.base + __popc(lo.mask & ((1u << i) - 1u))) : __fmul_rn(x[i], sc);
  }
}

// Exact-cache slot of token t's block for this (layer, KV head); −1 when it is read quantized.
template <bool EXACT>
__device__ __forceinline__ int32_t ExactSlotOf(const DecodeParams& p, int64_t block, int kvh) {
  if constexpr (!EXACT) {
    return -1;
  } else {
    if (p.exact_slot == nullptr) return -1;  // group-keyed schemes run EXACT with no table
    return __ldg(p.exact_slot + (block * p.num_layers + p.layer) * p.layout.num_kv_heads + kvh);
  }
}

// Shared memory beyond the dynamic logits region.
template <int GMAX>
struct DecodeSmem {
  float wt[GMAX][kTile];        // weights of the current tile
  float vn[kTile];              // ‖ṽ‖ of the current tile's rows without a value summary (meter)
  float m[GMAX];                // split max per query head
  float eta[GMAX];
  float red[kWarps][GMAX];      // scratch for max / eta reductions
  float qbn[GMAX][64];          // query band norms ‖q_b‖
  double q1[GMAX][64];          // per-band Σ|q_c| (Tier B ‖q‖₁)
  float tierb[GMAX];            // Tier B coefficient (0: none)
  meter::CertPartial wpart[kWarps];
};
// OUTLIERS (implies EXACT): the outlier channel bypass is on (p.num_outliers > 0). A separate
// variant, so the exact-read kernels of the gate and of kivi2 do not carry its registers.
template <class C, int D, int GMAX, bool METER, bool EXACT, bool OUTLIERS>
__global__ void __launch_bounds__(kThreads, GMAX == 8 ? 1 : 2) MeteredDecodeKernel(const DecodeParams p) {
  static_assert(EXACT || !OUTLIERS, "the bypass runs in the EXACT variant");
  constexpr int LPT = D / 8, TPW = 32 / LPT, U = kTile / (kWarps * TPW);
  constexpr int UB = (64 / C::kBytes) < U ? (64 / C::kBytes) : U;  // loads in flight per batch
  constexpr int NW = kChunkWords<C::kBytes>;
  extern __shared__ float logits[];  // [GMAX, lcap]; later [kWarps, GMAX, D] reduction
  __shared__ DecodeSmem<GMAX> sm;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int sub = lane / LPT, part = lane % LPT, ch0 = part * 8;
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const PagedKvLayout& L = p.layout;
  const int32_t hkv = L.num_kv_heads, bs = L.block_size, nb = L.num_bands, G = p.q_per_kv;
  const SplitRange range = BeginSplit<D>(p, seq, split, kvh, tid);
  if (!range.run) return;
  const int64_t S = range.context, begin = range.begin, end = range.end;
  const int32_t* bt = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;
  const int32_t nscale = p.nscale;
  const int scale_idx = C::kScaled ? (nscale > 1 ? ch0 / 32 : 0) : 0;
  const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(D));
  const int h0 = kvh * G;
  // DitherTokenHash(seed, layer, kvh, pos) = DitherTokenHashAt(h1, pos).
  const uint64_t h1 = meter::DitherHeadHash(p.seed, static_cast<uint32_t>(p.layer), static_cast<uint32_t>(kvh));

  float q[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[g][i] = g < G ? p.q[(static_cast<int64_t>(seq) * p.num_q_heads + h0 + g) * D + ch0 + i] : 0.0f;
    }
  }

  LaneOutliers ko, vo;  // the lane's outlier channels, K and V (OUTLIERS)
  if constexpr (OUTLIERS) {
    ko = FindLaneOutliers(p, kvh, false, ch0);
    vo = FindLaneOutliers(p, kvh, true, ch0);
  }

  // ---- meter prologue: query band norms and the Tier B coefficient (CPU: PrepareMeteredQuery)
  constexpr bool has_w = !C::kExact;
  if constexpr (METER) {
    if (has_w) QueryBandPrologue<D>(p, seq, h0, G, nb, tid, kThreads, sm);
    __syncthreads();
    if (tid < GMAX) sm.tierb[tid] = tid < G ? TierBCoefficientOfHead<D, C::kTierB>(sm, tid, nb, S, p.delta_loc) : 0.0f;
  }

  // ---- pass 1: logits of the whole split ------------------------------------------------
  float mloc[GMAX], admax[GMAX];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) { mloc[g] = -INFINITY; admax[g] = 0.0f; }
  const uint8_t* kc = p.kv.k_codes;
  const int64_t cb = p.code_bytes;
  for (int64_t base = begin; base < end; base += kTile) {
#pragma unroll
    for (int u0 = 0; u0 < U; u0 += UB) {
      uint32_t raw[UB][NW];
      float sc[UB];
      float xe[EXACT ? UB : 1][8];  // exact rows (EXACT)
      bool ex[UB];
      const uint16_t* prm[C::kAffineParams ? UB : 1];  // decode parameters (kivi2)
#pragma unroll
      for (int u = 0; u < UB; ++u) {
        const int64_t t = base + (u0 + u) * kWarps * TPW + warp * TPW + sub;
        ex[u] = false;
        if constexpr (C::kAffineParams) prm[u] = nullptr;
        if (t < end) {
          const int64_t blk = bt[static_cast<int32_t>(t) >> p.bs_shift];
          const int64_t vec = ((blk * hkv + kvh) << p.bs_shift) + (static_cast<int32_t>(t) & (bs - 1));
          LoadChunk<C::kBytes>(kc + vec * cb + part * C::kBytes, raw[u]);
          sc[u] = C::kScaled ? Bf16Bits(p.kv.k_scales[vec * nscale + scale_idx]) : 1.0f;
          if constexpr (C::kAffineParams) prm[u] = KeyParams<C, D>(p.kv, blk * hkv + kvh, ch0);
          if constexpr (EXACT) {
            const int32_t slot = ExactSlotOf<EXACT>(p, blk, kvh);
            if (slot >= 0) {
              LoadExactRow8<D>(p, slot, /*is_value=*/false, t, bs, ch0, xe[u]);
              ex[u] = true;
              sc[u] = 1.0f;
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < NW; ++i) raw[u][i] = 0u;
          sc[u] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < UB; ++u) {
        const int64_t t = base + (u0 + u) * kWarps * TPW + warp * TPW + sub;
        DecodeCtx ctx{C::kTierB ? meter::DitherTokenHashAt(h1, static_cast<uint64_t>(t)) : 0ull, ch0, false};
        if constexpr (C::kAffineParams) ctx.params = prm[u];
        float x[8];
        C::Decode8(raw[u], ctx, x);
        if constexpr (EXACT) {
          if (ex[u]) {
#pragma unroll
            for (int i = 0; i < 8; ++i) x[i] = xe[u][i];
          } else if constexpr (OUTLIERS) {
            if (t < end) {
              ToStoredWithOutliers(x, sc[u], ko, p.kv.k_outliers + TokenVector(p, bt, t, kvh) * p.num_outliers);
              sc[u] = 1.0f;
            }
          }
        }
        float dot[GMAX];
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          float s = 0.0f, a = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            s = fmaf(q[g][i], x[i], s);
            if (METER) a = fmaf(fabsf(q[g][i]), fabsf(x[i]), a);
          }
          dot[g] = s * sc[u];
          if (METER) admax[g] = fmaxf(admax[g], a * sc[u]);
        }
#pragma unroll
        for (int o = LPT / 2; o > 0; o >>= 1) {
#pragma unroll
          for (int g = 0; g < GMAX; ++g) dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], o);
        }
        if (part == 0 && t < end) {
#pragma unroll
          for (int g = 0; g < GMAX; ++g) {
            const float l = dot[g] * inv_sqrt_d;
            logits[g * p.lcap + (t - begin)] = l;
            mloc[g] = fmaxf(mloc[g], l);
          }
        }
      }
    }
  }
  // Split max per head; η bound: Σ over a token's lanes of each lane's max_t Σ|q x|·s.
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    float m = mloc[g];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    mloc[g] = m;
    if (METER) {
      float a = admax[g];
#pragma unroll
      for (int o = LPT / 2; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
#pragma unroll
      for (int o = 16; o >= LPT; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
      admax[g] = a;
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GMAX; ++g) sm.red[warp][g] = mloc[g];
  }
  __syncthreads();
  if (tid < GMAX) {
    float m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm.red[w][tid]);
    sm.m[tid] = m > -INFINITY ? m : 0.0f;  // all logits NaN: the partial is marked bad later
  }
  __syncthreads();
  if (METER) {
    if (lane == 0) {
#pragma unroll
      for (int g = 0; g < GMAX; ++g) sm.red[warp][g] = admax[g];
    }
    __syncthreads();
    if (tid < GMAX) {
      float a = 0.0f;
      for (int w = 0; w < kWarps; ++w) a = fmaxf(a, sm.red[w][tid]);
      sm.eta[tid] = meter::EtaFactor(D) * a * inv_sqrt_d;
    }
  }

  // ---- pass 2: weights, V, meter ---------------------------------------------------------
  float acc[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }
  const int my_g = warp % GMAX;  // step (c): this thread's query head
  meter::CertPartial cp;
  cp.m = sm.m[my_g];
  const uint8_t* vc = p.kv.v_codes;
  const float infl = meter::EpsInflation(D, nb);
  for (int64_t base = begin; base < end; base += kTile) {
    // (a) weights
    for (int i = tid; i < GMAX * kTile; i += kThreads) {
      const int g = i / kTile, j = i % kTile;
      const int64_t t = base + j;
      sm.wt[g][j] = (g < G && t < end) ? expf(logits[g * p.lcap + (t - begin)] - sm.m[g]) : 0.0f;
    }
    __syncthreads();
    // (b) values
#pragma unroll
    for (int u0 = 0; u0 < U; u0 += UB) {
      uint32_t raw[UB][NW];
      float sc[UB];
      float xe[EXACT ? UB : 1][8];
      bool ex[UB];
      const uint16_t* prm[C::kAffineParams ? UB : 1];
#pragma unroll
      for (int u = 0; u < UB; ++u) {
        const int64_t t = base + (u0 + u) * kWarps * TPW + warp * TPW + sub;
        ex[u] = false;
        if constexpr (C::kAffineParams) prm[u] = nullptr;
        if (t < end) {
          const int64_t blk = bt[static_cast<int32_t>(t) >> p.bs_shift];
          const int64_t vec = ((blk * hkv + kvh) << p.bs_shift) + (static_cast<int32_t>(t) & (bs - 1));
          LoadChunk<C::kBytes>(vc + vec * cb + part * C::kBytes, raw[u]);
          sc[u] = C::kScaled ? Bf16Bits(p.kv.v_scales[vec * nscale + scale_idx]) : 1.0f;
          if constexpr (C::kAffineParams) prm[u] = ValueParams<C>(p.kv, vec);
          if constexpr (EXACT) {
            const int32_t slot = ExactSlotOf<EXACT>(p, blk, kvh);
            if (slot >= 0) {
              LoadExactRow8<D>(p, slot, /*is_value=*/true, t, bs, ch0, xe[u]);
              ex[u] = true;
              sc[u] = 1.0f;
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < NW; ++i) raw[u][i] = 0u;
          sc[u] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < UB; ++u) {
        const int j = (u0 + u) * kWarps * TPW + warp * TPW + sub;
        const int64_t t = base + j;
        DecodeCtx ctx{0ull, ch0, true};  // values are not dithered
        if constexpr (C::kAffineParams) ctx.params = prm[u];
        float x[8];
        C::Decode8(raw[u], ctx, x);
        if constexpr (EXACT) {
          if (ex[u]) {
#pragma unroll
            for (int i = 0; i < 8; ++i) x[i] = xe[u][i];
          } else if constexpr (OUTLIERS) {
            if (t < end) {  // stored values: its summary's ν covers them
              ToStoredWithOutliers(x, sc[u], vo, p.kv.v_outliers + TokenVector(p, bt, t, kvh) * p.num_outliers);
              sc[u] = 1.0f;
            }
          }
        }
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          const float ws = sm.wt[g][j] * sc[u];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(ws, x[i], acc[g][i]);
        }
        if constexpr (METER && (C::kExact || EXACT)) {
          // ‖ṽ‖ of a row without a value summary (an exact scheme's, or an exact copy), by the
          // wide-range path: fp32 squares can overflow or underflow. A token's LPT lanes agree
          // on `own`; the vote keeps the shuffles warp-uniform and skips warps of stored rows.
          const bool own = C::kExact || ex[u];
          if (C::kExact || __any_sync(0xffffffffu, own)) {
            const float norm = WideRangeRowNorm<D, LPT>(x, sc[u]);
            if (part == 0 && own) sm.vn[j] = norm;
          }
        }
      }
    }
    __syncthreads();
    // (c) certificate partials: thread = (query head my_g, tokens lane + 32k)
    for (int k = warp / GMAX; k < kTile / 32; k += kWarps / GMAX) {
      const int j = lane + 32 * k;
      const int64_t t = base + j;
      if (my_g >= G || t >= end) continue;
      const float l = logits[my_g * p.lcap + (t - begin)];
      if constexpr (METER) {
        const int64_t blk = bt[static_cast<int32_t>(t) >> p.bs_shift];
        const int64_t vec = ((blk * hkv + kvh) << p.bs_shift) + (static_cast<int32_t>(t) & (bs - 1));
        const float ks = C::kTierB ? Bf16Bits(p.kv.k_scales[vec]) : 0.0f;
        float eps, rho = 0.0f, vb;  // ε̂, ρ, ν (the vmax candidate)
        if (EXACT && ExactSlotOf<EXACT>(p, blk, kvh) >= 0) {
          eps = 0.0f;  // an exact copy: no quantization error, ρ = 0, ν = its own ‖ṽ‖ from (b)
          vb = sm.vn[j];
        } else {
          eps = nb == 8 ? TokenEpsilon<8>(p.kv.k_witness + vec * 8, p.kv.k_witness_unit + vec, 8, sm.qbn[my_g],
                                          inv_sqrt_d, infl, has_w, sm.tierb[my_g], ks)
                        : TokenEpsilon<0>(p.kv.k_witness + vec * nb, p.kv.k_witness_unit + vec, nb, sm.qbn[my_g],
                                          inv_sqrt_d, infl, has_w, sm.tierb[my_g], ks);
          if constexpr (has_w) {  // the stored row's value summary
            const uint32_t vs = __ldg(reinterpret_cast<const unsigned int*>(p.kv.v_summary + 2 * vec));
            rho = SummaryRho(vs);
            vb = SummaryNu(vs);
          } else {
            vb = sm.vn[j];  // exact values: ρ = 0, ν = the row's own ‖ṽ‖ from (b)
          }
        }
        meter::PartialAddToken(&cp, l, eps, rho, vb, 0.0f);
      } else {
        cp.z += sm.wt[my_g][j];
        cp.count += 1;
        cp.chain += 1;
      }
    }
    __syncthreads();
  }

  // ---- reductions: certificate partials, then output accumulators ------------------------
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) cp = meter::SumPartialsSameMax(cp, ShflXorPartial(cp, o));
  if (lane == 0) sm.wpart[warp] = cp;
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int o = 16; o >= LPT; o >>= 1) acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], o);
    }
  }
  float* red = logits;  // [kWarps, GMAX, D]; logits are dead after the last (c)
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
#pragma unroll
      for (int i = 0; i < 8; ++i) red[(warp * GMAX + g) * D + ch0 + i] = acc[g][i];
    }
  }
  __syncthreads();
  const int64_t cell0 = (static_cast<int64_t>(seq) * p.num_q_heads + h0) * p.num_splits + split;
  if (tid < G) {
    meter::CertPartial r;
    for (int w = tid; w < kWarps; w += GMAX) r = meter::SumPartialsSameMax(r, sm.wpart[w]);
    r.m = sm.m[tid];
    if (METER) r.eta_max = fmaxf(r.eta_max, sm.eta[tid]);
    p.parts[cell0 + static_cast<int64_t>(tid) * p.num_splits] = r;
  }
  for (int i = tid; i < G * D; i += kThreads) {
    const int g = i / D, c = i % D;
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += red[(w * GMAX + g) * D + c];
    p.part_acc[(cell0 + static_cast<int64_t>(g) * p.num_splits) * D + c] = s;
  }
}

template <class C, int D, int GMAX, bool METER, bool EXACT = false, bool OUTLIERS = false>
CudaStatus LaunchDecode(const DecodeParams& p, dim3 grid, size_t dyn_smem, cudaStream_t stream) {
  auto kernel = MeteredDecodeKernel<C, D, GMAX, METER, EXACT, OUTLIERS>;
  WITCERT_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(dyn_smem)));
  kernel<<<grid, kThreads, dyn_smem, stream>>>(p);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

// Dispatch over head dim, group bound, meter and exact reads for one codec (defined per codec
// family). Exact reads (p.exact_slot set) come with the meter: they exist for the gate. A
// group-keyed codec (kivi2) always runs the EXACT kernel, meter on or off: its blocks whose
// keys are not encoded yet are read from the exact table (paged_kv_cuda.h).
template <class C>
CudaStatus LaunchDecodeForCodec(const DecodeParams& p, bool meter, dim3 grid, size_t dyn_smem,
                                cudaStream_t stream) {
  const int d = p.layout.head_dim;
  const bool g8 = p.q_per_kv > 4;
  const bool exact = p.exact_slot != nullptr;
  const bool outliers = p.num_outliers > 0;
  constexpr bool kAlwaysExact = C::kAffineParams;
  if ((exact || outliers) && !meter && !kAlwaysExact) {
    return CudaStatus::Error("MeteredDecodeCuda: exact reads and outlier channels need the meter on");
  }
#define WITCERT_DECODE_CASE(D_, G_)                                                             \
  if (d == D_ && g8 == (G_ == 8)) {                                                             \
    if constexpr (C::kExact) {                                                                  \
      if (outliers) return CudaStatus::Error("MeteredDecodeCuda: an exact scheme has no outliers"); \
    } else {                                                                                    \
      if (outliers && meter) return LaunchDecode<C, D_, G_, true, true, true>(p, grid, dyn_smem, stream); \
      if constexpr (kAlwaysExact) {                                                             \
        if (outliers) return LaunchDecode<C, D_, G_, false, true, true>(p, grid, dyn_smem, stream); \
      }                                                                                         \
    }                                                                                           \
    if constexpr (kAlwaysExact) {                                                               \
      return meter ? LaunchDecode<C, D_, G_, true, true>(p, grid, dyn_smem, stream)             \
                   : LaunchDecode<C, D_, G_, false, true>(p, grid, dyn_smem, stream);           \
    } else {                                                                                    \
      if (exact) return LaunchDecode<C, D_, G_, true, true>(p, grid, dyn_smem, stream);         \
      return meter ? LaunchDecode<C, D_, G_, true>(p, grid, dyn_smem, stream)                   \
                   : LaunchDecode<C, D_, G_, false>(p, grid, dyn_smem, stream);                 \
    }                                                                                           \
  }
  WITCERT_DECODE_CASE(64, 4)
  WITCERT_DECODE_CASE(64, 8)
  WITCERT_DECODE_CASE(128, 4)
  WITCERT_DECODE_CASE(128, 8)
#undef WITCERT_DECODE_CASE
  return CudaStatus::Error("MeteredDecodeCuda: head_dim must be 64 or 128, got " + std::to_string(d));
}

}  // namespace witcert::cuda_kv
