// Rows the pipelined decode kernel (metered_decode_pipelined.cuh) reads exact, from the exact-block
// cache: a group-keyed scheme's (kivi2) blocks whose keys are not encoded yet, and blocks the gate
// promoted. What the first kernel's EXACT variant does, per 8-token group of the split's stages:
//  * the group's cache slot is looked up once per CTA, beside its vector index (FillGroupVectors);
//  * in either pass, a token of such a group takes the lane's 8 channels from the cache (fp32)
//    instead of its codes, scale 1 (the codecs that read exact rows are unscaled);
//    kivi2's tensor-core passes take them beside their MMAs (KeyLogit, AddTcValueRows);
//  * with the meter, the V stage's staged unit and value summary of those tokens are zeroed before
//    the weights step, so ε̂ = ρ = 0 and ν = 0 there, and the value pass takes the row's own ‖ṽ‖
//    into vmax (the wide-range norm, as for an exact scheme).
// ENABLED = false compiles to nothing: every other codec's kernel is unchanged.
#pragma once

#include <cstdint>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/pipe_stage.cuh"

namespace witcert::cuda_kv {

template <int D, bool ENABLED>
class PipeExactRows {
 public:
  // gexact: the split's groups' cache slots, filled by FillGroupVectors (decode_common.cuh) in
  // dynamic shared memory (PipeSmemPlan::gexact_off) and read after the caller's next barrier;
  // begin_al: the split's first stage's token 0.
  __device__ PipeExactRows(const DecodeParams& p, const int32_t* gexact, int32_t begin_al, int ch0)
      : gexact_(gexact), exact_kv_(p.exact_kv), begin_al_(begin_al), block_size_(p.layout.block_size), ch0_(ch0),
        on_(ENABLED && p.exact_slot != nullptr) {}

  __device__ __forceinline__ bool on() const { return on_; }

  // Stage `stage`'s token jj (K stage index, or V stage index − n_st): its exact row of `side`
  // (0: K, 1: V), the lane's 8 channels, into x, if its group is in the cache; false (x untouched)
  // otherwise.
  __device__ __forceinline__ bool Row(int stage, int jj, int side, float (&x)[8]) const {
    const float* row = RowOf(stage, jj, side);
    if (row == nullptr) return false;
    const float4* src = reinterpret_cast<const float4*>(row + ch0_);
    const float4 a = __ldg(src), b = __ldg(src + 1);
    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
    x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
    return true;
  }

  // The same token's whole exact row of `side` ([D] fp32, global), or null where its group is
  // not in the cache.
  __device__ __forceinline__ const float* RowOf(int stage, int jj, int side) const {
    if constexpr (ENABLED) {
      const int32_t slot = gexact_[kStageGroups * stage + jj / 8];
      if (slot < 0) return nullptr;
      const int32_t pos = (begin_al_ + kStageTokens * stage + jj) & (block_size_ - 1);
      return exact_kv_ + ((static_cast<int64_t>(slot) * 2 + side) * block_size_ + pos) * D;
    } else {
      return nullptr;
    }
  }

  // Whether stage `stage`'s token jj is read exact.
  __device__ __forceinline__ bool IsExact(int stage, int jj) const {
    return ENABLED && on_ && gexact_[kStageGroups * stage + jj / 8] >= 0;
  }

  // Whether any group of stage `stage` is read exact (uniform across the CTA).
  __device__ __forceinline__ bool StageHasExact(int stage) const {
    if constexpr (ENABLED) {
      if (!on_) return false;
      const int32_t* ge = gexact_ + kStageGroups * stage;
      bool any = false;
#pragma unroll
      for (int i = 0; i < kStageGroups; ++i) any |= ge[i] >= 0;
      return any;
    } else {
      return false;
    }
  }

  // V stage `stage` (index − n_st), before the weights step reads it: the staged K band unit and
  // value summary of its exact tokens become 0. Every thread calls; where the stage has an exact
  // group (uniform across the CTA) the writes are followed by a barrier.
  __device__ __forceinline__ void ClearStagedWitness(int stage, uint8_t* st, const StageLayout& sl, int tid) const {
    if constexpr (ENABLED) {
      if (!StageHasExact(stage)) return;
      if (tid < kStageTokens && gexact_[kStageGroups * stage + tid / 8] >= 0) {
        reinterpret_cast<uint16_t*>(st + sl.kunit)[tid] = 0;
        reinterpret_cast<uint32_t*>(st + sl.vsum)[tid] = 0u;
      }
      __syncthreads();
    }
  }

  // kivi2's tensor-core K pass (metered_decode_pipelined.cuh, kTcK2), whose tiles take no exact
  // rows: stage `stage`'s token jj's logit for the query row qg ([D] fp32, global) from its exact key
  // row (its group must be in the cache: IsExact), a sequential fp32 dot over √d; with METER, *eta
  // its η, EtaFactor(d)·Σ|q_c x_c|/√d (certificates.md §4).
  template <bool METER>
  __device__ __forceinline__ float KeyLogit(int stage, int jj, const float* qg, float inv_sqrt_d, float* eta) const {
    return ExactKeyLogit<D, METER>(qg, RowOf(stage, jj, 0), inv_sqrt_d, eta);
  }
  // kivi2's tensor-core value pass (metered_decode_pipelined.cuh, kTcV2), whose MMAs take the
  // exact rows with weight 0. Where V stage `stage` has an exact group (uniform across the CTA):
  //  * eacc[n] += Σ_t w[4n + tig][t]·ṽ_t at channels ch, ch + 1 over its exact tokens t inside
  //    the split (t's offset off0 + t in [0, n_split)), w the stage's fp32 weights [head, token];
  //  * with the meter, group `grp`'s rows' ‖ṽ‖ into *vmax by the wide-range norm, lanes as the
  //    CUDA-core pass holds them (LPT a token, `sub` the lane's token of a pass): every lane of the
  //    warp calls, the group uniform across it.
  template <bool METER, int NT, int LPT, int TOKENS>
  __device__ __forceinline__ void AddTcValueRows(int stage, int32_t off0, int32_t n_split, int ch, int tig,
                                                 const float (&w)[NT * 4][TOKENS], float (&eacc)[NT][2], int grp,
                                                 int sub, float* vmax) const {
    if (!StageHasExact(stage)) return;
#pragma unroll 1
    for (int jj = 0; jj < TOKENS; ++jj) {
      const float* row = RowOf(stage, jj, 1);
      if (row == nullptr || off0 + jj < 0 || off0 + jj >= n_split) continue;
      const float2 x = __ldg(reinterpret_cast<const float2*>(row + ch));
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        eacc[n][0] = fmaf(w[4 * n + tig][jj], x.x, eacc[n][0]);
        eacc[n][1] = fmaf(w[4 * n + tig][jj], x.y, eacc[n][1]);
      }
    }
    if (METER && IsExact(stage, 8 * grp)) {
      constexpr int kTokensPerPass = 32 / LPT;
#pragma unroll 1
      for (int u = 0; u < 8 / kTokensPerPass; ++u) {
        const int j = 8 * grp + sub + kTokensPerPass * u;
        const bool valid = off0 + j >= 0 && off0 + j < n_split;
        float x[8] = {};
        if (valid) Row(stage, j, 1, x);
        const float norm = WideRangeRowNorm<D, LPT>(x, 1.0f);
        if (valid) *vmax = meter::MaxAcc(*vmax, norm);
      }
    }
  }

 private:
  const int32_t* gexact_;
  const float* exact_kv_;
  int32_t begin_al_, block_size_;
  int ch0_;
  bool on_;
};

}  // namespace witcert::cuda_kv
