// The pipelined decode kernel's weights step (metered_decode_pipelined.cuh, pass 2 (a)): per V
// stage, each thread's attention weights w = e^{ℓ̂−m}, handed to the value pass, and with the
// meter the certificate terms of those tokens, summed per query head over the split.
//
// Thread mapping: thread = (HPT heads of group tid / TPG, tokens tid % TPG + TPG·r, r < NPT),
// heads warp-uniform. HPT = 1: GMAX = 4 gives each thread one (head, token), GMAX = 8 one head
// and two tokens. Two heads a thread (a token's key band codes, unit, value summary and K scale
// read once for both, half the threads idle at GMAX = 4) measured 3-5% slower on fp8-e4m3 and
// fp16, meter on and off (bench/RESULTS.md, twenty-first session): the step is bound by its
// per-thread latency between two barriers, not by instruction issue. The sums are the tensor-core int8 kernel's (mma_head_sums.cuh): the
// common tokens' A−1 terms in power sums, folded in after the split, and the in-range token
// count in 32 bits (the partial's count and chain). With the meter the step is branch-free but
// for the rare tokens that need PartialAddTokenWeighted's general arithmetic: every read stays
// inside the stage, the logits and shared memory, and a masked token's values (ε̂, ρ, ν:
// zero-filled or stale bytes) are selected away. Without it, the weights alone under `act`
// (selecting there measured 5% slower on fp8-e4m3).
#pragma once

#include <cstdint>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/mma_head_sums.cuh"
#include "kernels/cuda/pipe_stage.cuh"
#include "kernels/cuda/tier_a_digits.cuh"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/partial_sum.h"

namespace witcert::cuda_kv {

constexpr int kWeightsStepHeadsPerThread = 1;  // see the thread mapping above

// C: the device codec; NS: K scales per vector; kWit: the K band witness and value summary
// are staged (the meter on a lossy scheme); kKScale: Tier B's K scales are staged.
template <class C, int GMAX, bool METER, int NS>
struct PipeWeightsStep {
  static constexpr int HPT = kWeightsStepHeadsPerThread;
  static constexpr int TPG = kThreads * HPT / GMAX;      // threads per head group: 128 or 32
  static constexpr int NPT = TPG >= kStageTokens ? 1 : kStageTokens / TPG;  // tokens a thread
  static constexpr int kGroupWarps = (TPG < kStageTokens ? TPG : kStageTokens) / 32;  // working warps a group
  static_assert(TPG * NPT >= kStageTokens && kThreads % TPG == 0, "every (head, token) has a thread");
  static constexpr bool kWit = METER && !C::kExact;
  static constexpr bool kKScale = METER && C::kTierB;

  int hg, hj;    // head group (heads hg·HPT + i), the thread's first token of a stage
  bool step_on;  // hj < kStageTokens: the thread works in this step (warp-uniform)
  bool head_on[HPT];
  MmaHeadSums hs[HPT];
  meter::EpsPowerSums hps[HPT];
  int32_t n_in = 0;  // the thread's in-range tokens so far
  uint32_t qd[HPT][4];  // B = 8: the heads' Tier A band factor digits (tier_a_digits.cuh)
  float qds[HPT];       // and their units

  // After the barrier that publishes the prologue's band factor digits.
  template <class Smem>
  __device__ __forceinline__ void Init(const Smem& sm, int tid, int G, int nb) {
    hg = tid / TPG;
    hj = tid % TPG;
    step_on = hj < kStageTokens;
#pragma unroll
    for (int i = 0; i < HPT; ++i) {
      const int g = hg * HPT + i;
      head_on[i] = step_on && g < G;
      qds[i] = kWit && nb == 8 ? sm.qbn_scale[g] : 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) qd[i][j] = kWit && nb == 8 ? sm.qbn16[g][j] : 0u;
    }
  }

  // One V stage: st the stage's bytes (layout sl), logits [GMAX, lcap] of the split, off0 the
  // stage's token 0 as an offset in the split of n_split tokens. store_weight(g, jj, w, vs)
  // hands head g's weight of stage token jj to the value pass; vscale_of(jj) is the token's
  // V scale factor for it. vmax: the running max of ν over in-range tokens.
  template <class Smem, class StoreWeight, class VScaleOf>
  __device__ __forceinline__ void Stage(const Smem& sm, const uint8_t* st, const StageLayout& sl, const float* logits,
                                        int32_t lcap, int32_t off0, int32_t n_split, int nb, float inv_sqrt_d,
                                        float infl, float* vmax, StoreWeight&& store_weight, VScaleOf&& vscale_of) {
#pragma unroll
    for (int r = 0; r < NPT; ++r) {
      if (!step_on) break;
      const int jj = hj + TPG * r;
      const int32_t o = off0 + jj;
      const bool in = o >= 0 && o < n_split;
      n_in += in ? 1 : 0;
      const float vs = vscale_of(jj);
      if constexpr (!METER) {
#pragma unroll
        for (int i = 0; i < HPT; ++i) {
          const int g = hg * HPT + i;
          float w = 0.0f;
          if (in && head_on[i]) {
            w = expf(logits[g * lcap + o] - sm.m[g]);
            hs[i].z += w;
          }
          store_weight(g, jj, w, vs);
        }
      } else {
        const int32_t li = min(max(o, 0), lcap - 1);
        float l[HPT], w[HPT], e[HPT];
        bool act[HPT];
#pragma unroll
        for (int i = 0; i < HPT; ++i) {
          const int g = hg * HPT + i;
          act[i] = in && head_on[i];
          l[i] = logits[g * lcap + li];
          w[i] = act[i] ? expf(l[i] - sm.m[g]) : 0.0f;
          store_weight(g, jj, w[i], vs);
          e[i] = 0.0f;
        }
        float rho = 0.0f;
        if constexpr (kWit) {
          const float unit = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.kunit)[jj]);
          if (nb == 8) {  // ε ≥ Σ_b f_b·c_b·U in integers, rounded up (tier_a_digits.cuh)
            const uint2 kc = *reinterpret_cast<const uint2*>(st + sl.kwit + jj * 8);
#pragma unroll
            for (int i = 0; i < HPT; ++i) e[i] = TierAEpsilonOfDigits(qd[i], kc, unit, qds[i]);
          } else {
            const uint8_t* kc = st + sl.kwit + jj * nb;
            float wbnd[64];
            for (int b = 0; b < nb; ++b) wbnd[b] = meter::BandWitnessBound(kc[b], unit);
#pragma unroll
            for (int i = 0; i < HPT; ++i) e[i] = meter::TierAEpsilon(sm.qbn[hg * HPT + i], wbnd, nb, inv_sqrt_d, infl);
          }
          const uint32_t vsum = reinterpret_cast<const uint32_t*>(st + sl.vsum)[jj];
          rho = SummaryRho(vsum);
          *vmax = in ? meter::MaxAcc(*vmax, SummaryNu(vsum)) : *vmax;  // NaN ignored, as PartialAddToken does
        }
        if constexpr (kKScale) {  // Tier B: ε̂ = min(ε, u_t), u_t = C·s_t
          const float ks = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.kscales)[jj * NS]);
#pragma unroll
          for (int i = 0; i < HPT; ++i) {
            const float tb = sm.tierb[hg * HPT + i];
            const float ub = tb * ks * (1.0f + 4 * meter::kUnitRoundoff);
            if (tb > 0.0f) e[i] = kWit ? fminf(e[i], ub) : ub;
          }
        }
        bool rare = false;
#pragma unroll
        for (int i = 0; i < HPT; ++i) rare = rare || (act[i] && !meter::WeightedTokenIsCommon(l[i], w[i], e[i]));
        if (rare) {
#pragma unroll
          for (int i = 0; i < HPT; ++i) {
            if (act[i]) hs[i].Add(l[i], w[i], sm.m[hg * HPT + i], e[i], rho);
          }
        } else {
#pragma unroll
          for (int i = 0; i < HPT; ++i) hs[i].AddCommonPowers(act[i], w[i], e[i], rho, &hps[i]);
        }
      }
    }
  }

  // After the split: the thread's partials summed over the warp's lanes (every lane calls),
  // stored by lane 0 in sm.wpart(warp, i), for HeadPartial after the caller's next barrier.
  template <class Smem>
  __device__ __forceinline__ void WarpPartials(Smem& sm, int warp, int lane) {
    meter::CertPartial cp[HPT];
#pragma unroll
    for (int i = 0; i < HPT; ++i) {
      if constexpr (METER) hs[i].FoldPowerSums(hps[i]);
      cp[i] = hs[i].ToPartial(sm.m[hg * HPT + i], head_on[i] ? n_in : 0);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) cp[i] = meter::SumPartialsSameMax(cp[i], ShflXorPartial(cp[i], o));
    }
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < HPT; ++i) sm.wpart(warp, i) = cp[i];
    }
  }

  // Head g's partial over the split: the sum of its group's working warps' partials.
  template <class Smem>
  __device__ __forceinline__ static meter::CertPartial HeadPartial(Smem& sm, int g) {
    const int w0 = TPG / 32 * (g / HPT);
    meter::CertPartial c;
    for (int w = w0; w < w0 + kGroupWarps; ++w) c = meter::SumPartialsSameMax(c, sm.wpart(w, g % HPT));
    return c;
  }
};

}  // namespace witcert::cuda_kv
