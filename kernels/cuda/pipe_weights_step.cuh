// The pipelined decode kernel's weights step (metered_decode_pipelined.cuh, pass 2 (a)): per V
// stage, each thread's attention weights w = e^{ℓ̂−m}, handed to the value pass, and with the
// meter the certificate terms of those tokens, summed per query head over the split.
//
// Thread mapping: thread = (head g = tid / TPH, tokens tid % TPH + TPH·r, r < NP), the head
// warp-uniform: GMAX = 4 gives each thread one token, GMAX = 8 two. Two heads a thread (a
// token's key band codes, unit, value summary and K scale read once for both, half the threads
// idle at GMAX = 4) measured 3-5% slower on fp8-e4m3 and fp16, meter on and off (bench/RESULTS.md,
// twenty-first session), likely because the step's time is each thread's dependent chain
// between two barriers rather than instruction issue.
//
// The sums are the tensor-core int8 kernel's (mma_head_sums.cuh): the common tokens' A−1 terms
// in power sums, folded in after the split, and the in-range token count in 32 bits (the
// partial's count and chain). With the meter the step is branch-free but for the rare tokens
// that need PartialAddTokenWeighted's general arithmetic (ε̂ past ½ with a finite logit and a direct
// weight is not rare for codes of ≤ 4 bits: AddMid, for every token): every read stays inside the stage,
// the logits and shared memory, and a masked token's values (ε̂, ρ, ν: zero-filled or stale
// bytes) are selected away. Without it, the weights alone under `act` (selecting there
// measured 5% slower on fp8-e4m3).
#pragma once

#include <cstdint>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/mma_head_sums.cuh"
#include "kernels/cuda/pipe_stage.cuh"
#include "kernels/cuda/tier_a_digits.cuh"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/partial_sum.h"

namespace witcert::cuda_kv {

// C: the device codec; NS: K scales per vector. kWit: the K band witness and value summary are
// staged (the meter on a lossy scheme); kKScale: Tier B's K scales are staged.
template <class C, int GMAX, bool METER, int NS>
struct PipeWeightsStep {
  static constexpr int TPH = kThreads / GMAX;        // threads per head: 64 or 32
  static constexpr int NP = kStageTokens / TPH;      // tokens a thread per stage: 1 or 2
  static_assert(TPH * GMAX == kThreads && TPH * NP == kStageTokens, "every (head, token) has one thread");
  static constexpr bool kWit = METER && !C::kExact;
  static constexpr bool kKScale = METER && C::kTierB;
  // Codes of ≤ 4 bits (int4, kivi2), whose ε̂ is mostly past ½: those tokens branch-free (AddMid).
  // Elsewhere they stay with the rare ones (AddMid under a warp vote measured +0.5–0.7% on fp8-e4m3).
  static constexpr bool kMidTokens = METER && C::kBytes <= 4;

  int g, j0;         // the thread's head and first token of a stage
  bool head_on;      // g < G
  float m = 0.0f;    // head g's split max (LoadMax)
  MmaHeadSums hs;
  meter::EpsPowerSums hps;
  int32_t n_in = 0;  // the thread's in-range tokens so far
  uint32_t qd[4];    // B = 8: the head's Tier A band factor digits (tier_a_digits.cuh)
  float qds;         // and their unit

  // After the barrier that publishes the prologue's band factor digits.
  template <class Smem>
  __device__ __forceinline__ void Init(const Smem& sm, int tid, int G, int nb) {
    g = tid / TPH;
    j0 = tid % TPH;
    head_on = g < G;
    qds = kWit && nb == 8 ? sm.qbn_scale[g] : 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) qd[j] = kWit && nb == 8 ? sm.qbn16[g][j] : 0u;
  }
  // After the barrier that publishes the split max (the first V stage's).
  template <class Smem>
  __device__ __forceinline__ void LoadMax(const Smem& sm) { m = sm.m[g]; }

  // One V stage: st the stage's bytes (layout sl), logits [GMAX, lcap] of the split, off0 the
  // stage's token 0 as an offset in the split of n_split tokens. store_weight(g, jj, w, vs)
  // hands head g's weight of stage token jj to the value pass; vscale_of(jj) is the token's
  // V scale factor for it. vmax: the running max of ν over in-range tokens.
  // With the meter a token's shared-memory reads come first (logit, V scale, K band codes and
  // unit, value summary, K scale), so their latencies overlap, and the rare tokens' general
  // arithmetic last: the step sits between two barriers, so its time is the thread's dependent
  // chain (ncu, bench/RESULTS.md twenty-second session).
  template <class Smem, class StoreWeight, class VScaleOf>
  __device__ __forceinline__ void Stage(const Smem& sm, const StageLayout& sl, const uint8_t* st,
                                        const float* logits, int32_t lcap, int32_t off0, int32_t n_split, int nb,
                                        float inv_sqrt_d, float infl, float* vmax, StoreWeight&& store_weight,
                                        VScaleOf&& vscale_of) {
    if constexpr (!METER) {
#pragma unroll
      for (int r = 0; r < NP; ++r) {
        const int jj = j0 + TPH * r;
        const int32_t o = off0 + jj;
        const bool in = o >= 0 && o < n_split;
        n_in += in ? 1 : 0;
        float w = 0.0f;
        if (in && head_on) {
          w = expf(logits[g * lcap + o] - m);
          hs.z += w;
        }
        store_weight(g, jj, w, vscale_of(jj));
      }
    } else {
      float l[NP], w[NP], e[NP], rho[NP];
      bool rare[NP], mid[NP];
#pragma unroll
      for (int r = 0; r < NP; ++r) {
        const int jj = j0 + TPH * r;
        const int32_t o = off0 + jj;
        const bool in = o >= 0 && o < n_split, act = in && head_on;
        l[r] = logits[g * lcap + min(max(o, 0), lcap - 1)];
        const float vs = vscale_of(jj);
        float unit = 0.0f, ksc = 0.0f;
        uint2 kw = make_uint2(0u, 0u);
        uint32_t vsum = 0u;
        if constexpr (kWit) {
          unit = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.kunit)[jj]);
          kw = *reinterpret_cast<const uint2*>(st + sl.kwit + (nb == 8 ? 8 * jj : 0));  // B = 8's codes
          vsum = reinterpret_cast<const uint32_t*>(st + sl.vsum)[jj];
        }
        if constexpr (kKScale) ksc = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.kscales)[jj * NS]);
        n_in += in ? 1 : 0;
        const float gap = l[r] - m;
        w[r] = act ? expf(gap) : 0.0f;
        store_weight(g, jj, w[r], vs);
        e[r] = 0.0f;
        rho[r] = 0.0f;
        if constexpr (kWit) {
          if (nb == 8) {  // ε ≥ Σ_b f_b·c_b·U in integers, rounded up (tier_a_digits.cuh)
            e[r] = TierAEpsilonOfDigits(qd, kw, unit, qds);
          } else {
            const uint8_t* kc = st + sl.kwit + jj * nb;
            float wb[64];
            for (int b = 0; b < nb; ++b) wb[b] = meter::BandWitnessBound(kc[b], unit);
            e[r] = meter::TierAEpsilon(sm.qbn[g], wb, nb, inv_sqrt_d, infl);
          }
          rho[r] = SummaryRho(vsum);
          *vmax = in ? meter::MaxAcc(*vmax, SummaryNu(vsum)) : *vmax;  // NaN ignored, as PartialAddToken does
        }
        if constexpr (kKScale) {  // Tier B: ε̂ = min(ε, u_t), u_t = C·s_t
          const float tb = sm.tierb[g];
          if (tb > 0.0f) {
            const float ub = tb * ksc * (1.0f + 4 * meter::kUnitRoundoff);
            e[r] = kWit ? fminf(e[r], ub) : ub;
          }
        }
        const bool common = meter::WeightedTokenIsCommonAtGap(l[r], gap, e[r]);  // not waiting for expf
        mid[r] = kMidTokens && act && !common && meter::WeightedTokenIsMidAtGap(l[r], gap, e[r]);
        rare[r] = act && !common && !mid[r];
        hs.AddCommonPowers(act && common, w[r], e[r], rho[r], &hps);
      }
      // ε̂ past ½ (kivi2's usual case): branch-free for every token, no warp vote (a vote measured
      // 1.4–1.8% slower on kivi2 with the weights a stage ahead, bench/RESULTS.md twenty-seventh
      // session: its branch kept the weights step apart from the value pass beside it).
      if constexpr (kMidTokens) {
#pragma unroll
        for (int r = 0; r < NP; ++r) hs.AddMid(mid[r], w[r], e[r], rho[r]);
      }
#pragma unroll
      for (int r = 0; r < NP; ++r) {
        if (rare[r]) hs.Add(l[r], w[r], m, e[r], rho[r]);
      }
    }
  }

  // After the split: the thread's partial summed over the warp's lanes (every lane calls),
  // stored by lane 0 in sm.wpart(warp), for HeadPartial after the caller's next barrier.
  template <class Smem>
  __device__ __forceinline__ void WarpPartial(Smem& sm, int warp, int lane) {
    if constexpr (METER) hs.FoldPowerSums(hps);
    meter::CertPartial cp = hs.ToPartial(m, head_on ? n_in : 0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) cp = meter::SumPartialsSameMax(cp, ShflXorPartial(cp, o));
    if (lane == 0) sm.wpart(warp) = cp;
  }

  // Head h's partial over the split: the sum of its threads' warps' partials.
  template <class Smem>
  __device__ __forceinline__ static meter::CertPartial HeadPartial(Smem& sm, int h) {
    meter::CertPartial c;
    for (int w = h * TPH / 32; w < (h + 1) * TPH / 32; ++w) c = meter::SumPartialsSameMax(c, sm.wpart(w));
    return c;
  }
};

}  // namespace witcert::cuda_kv
