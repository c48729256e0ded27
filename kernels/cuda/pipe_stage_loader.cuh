// The pipelined decode kernel's stage loader (metered_decode_pipelined.cuh): stage k of the
// split's global stage sequence into ring slot k % S by cp.async, K stages (k < n_st) then V
// stages, one commit group per call.
//  * Codes: a thread copies the same 16-byte chunk r of every GPI-th 8-token group, so its chunk,
//    source column and swizzled destination are fixed at construction; a stage then costs it one
//    group-table read, one wide multiply and the copy per chunk (the loader had been most of the
//    kernel's instructions, ncu: bench/RESULTS.md sixteenth session).
//  * Scales (scaled codecs) with every stage; scaled fp8 on tensor cores (VSCALE_MAX) copies the V
//    scales with the K stages too, into the stage's K-scale slot (free there), for their maximum.
//  * V stages with the meter: Tier B's K scales (KSCALE) and the witness chunks (WIT,
//    WitnessChunkOf): chunk ci by thread ci (and ci + kThreads, … for a large B). B = 8 takes the
//    chunk's role with constant divisors (the loop with divisions by a runtime B had cost the two
//    warps that ran it ~80 instructions a stage, ahead of the weights step's barrier: ncu,
//    bench/RESULTS.md twenty-second session).
#pragma once

#include <cstdint>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/cuda/pipe_stage.cuh"
#include "kernels/cuda/tc8_layout.h"

namespace witcert::cuda_kv {

// Where a stage row's 16-byte code chunks go: in place, or swizzled for the tensor-core passes.
enum class StageSwizzle {
  kNone,
  kTc,   // fp16 / bf16 at d = 128 (CB = 256): chunk c of token t at c ^ (t % 8)
  kTc8,  // fp8-e4m3 at d = 128 (CB = 128): chunk c of token t at c ^ Tc8Swizzle(t % 8)
};

// CB: code bytes per vector; NS: scales per vector (0: none); S: ring stages.
template <int CB, int NS, int S, StageSwizzle SWIZZLE, bool VSCALE_MAX, bool KSCALE, bool WIT>
class PipeStageLoader {
 public:
  static constexpr int kChunksPerGroup = CB / 2;  // 16-byte code chunks per 8-token group
  static_assert(kThreads % kChunksPerGroup == 0, "every thread copies one fixed chunk of its groups");
  static constexpr int kGroupsPerPass = kThreads / kChunksPerGroup;  // groups one pass of the CTA covers
  static constexpr int kCodePasses = kGroupsPerPass >= kStageGroups ? 1 : kStageGroups / kGroupsPerPass;

  __device__ PipeStageLoader(const StageLayout& sl, int tid) : tid_(tid), code_g0_(tid / kChunksPerGroup) {
    const int r = tid % kChunksPerGroup;
    // kTc: chunk r % 16 of token r / 16 (CB = 256) lands at chunk (r % 16) ^ (r / 16); kTc8: chunk
    // r % 8 of token r / 8 (CB = 128) at (r % 8) ^ Tc8Swizzle(r / 8).
    const int dr = SWIZZLE == StageSwizzle::kNone ? r
                   : SWIZZLE == StageSwizzle::kTc8 ? (r & ~7) | ((r & 7) ^ Tc8Swizzle(r >> 3))
                                                   : (r & ~15) | ((r & 15) ^ (r >> 4));
    code_dst_ = sl.codes + code_g0_ * 8 * CB + dr * 16;
  }

  // Stage k of the 2·n_st (past them only the commit, which keeps wait_group counting exact).
  // gvec: the first vector index of each 8-token group of the split's stages, kStageGroups a
  // stage (FillGroupVectors; kGroupOutside where the group is outside the split), K stage j and
  // V stage n_st + j alike; ring: the S slots of sl.bytes; nb: the witness bands.
  __device__ __forceinline__ void Issue(int k, int n_st, const int32_t* gvec, uint8_t* ring, const StageLayout& sl,
                                        const PagedKvLayer& kv, int nb) const {
    if (k < 2 * n_st) {
      const bool isv = k >= n_st;
      const int32_t* sg = gvec + kStageGroups * (isv ? k - n_st : k);  // this stage's groups
      uint8_t* st = ring + (k % S) * sl.bytes;
      // The source column from tid here, so no pointer is held across the stages.
      const uint8_t* csrc = (isv ? kv.v_codes : kv.k_codes) + (tid_ % kChunksPerGroup) * 16;
#pragma unroll
      for (int i = 0; i < kCodePasses; ++i) {
        const int grp = code_g0_ + i * kGroupsPerPass;
        if (kGroupsPerPass <= kStageGroups || grp < kStageGroups) {
          const int32_t v = sg[grp];
          const bool ok = v != kGroupOutside;
          CpAsync16(st + code_dst_ + i * kGroupsPerPass * 8 * CB, csrc + static_cast<int64_t>(ok ? v : 0) * CB, ok);
        }
      }
      if constexpr (NS > 0) {
        CopyScales(sg, st + sl.scales, reinterpret_cast<const uint8_t*>(isv ? kv.v_scales : kv.k_scales));
      }
      if constexpr (VSCALE_MAX) {
        if (!isv && tid_ < kStageGroups) {
          const int32_t v = sg[tid_];
          const bool ok = v != kGroupOutside;
          CpAsync16(st + sl.kscales + tid_ * 16,
                    reinterpret_cast<const uint8_t*>(kv.v_scales) + static_cast<int64_t>(ok ? v : 0) * 2, ok);
        }
      }
      if (isv) {
        if constexpr (KSCALE) CopyScales(sg, st + sl.kscales, reinterpret_cast<const uint8_t*>(kv.k_scales));
        if constexpr (WIT) {
          if (nb == 8) {
            static_assert(kThreads >= 8 * kStageGroups / 2 + 3 * kStageGroups, "one B = 8 chunk a thread");
            if (tid_ < WitnessChunksPerStage(8)) {
              CopyWitnessChunk(WitnessChunkOf(tid_, 8, sl, kv.k_witness, kv.k_witness_unit, kv.v_summary), st, sg);
            }
          } else {
            for (int ci = tid_; ci < WitnessChunksPerStage(nb); ci += kThreads) {
              CopyWitnessChunk(WitnessChunkOf(ci, nb, sl, kv.k_witness, kv.k_witness_unit, kv.v_summary), st, sg);
            }
          }
        }
      }
    }
    CpAsyncCommit();
  }

 private:
  // The stage's NS bf16 scales per vector, 16 bytes per 8-token group and scale, from src.
  __device__ __forceinline__ void CopyScales(const int32_t* sg, uint8_t* dst, const uint8_t* src) const {
    for (int ci = tid_; ci < kStageGroups * NS; ci += kThreads) {
      const int grp = ci / NS, r = ci % NS;
      const int32_t v = sg[grp];
      const bool ok = v != kGroupOutside;
      CpAsync16(dst + grp * 16 * NS + r * 16, src + static_cast<int64_t>(ok ? v : 0) * (2 * NS) + r * 16, ok);
    }
  }
  __device__ __forceinline__ static void CopyWitnessChunk(const WitnessChunk& c, uint8_t* st, const int32_t* sg) {
    const int32_t v = sg[c.grp];
    const bool ok = v != kGroupOutside;
    const uint8_t* src = c.src + static_cast<int64_t>(ok ? v : 0) * c.src_per_vector;
    if (c.bytes == 8) {
      CpAsync8(st + c.dst, src, ok);
    } else {
      CpAsync16(st + c.dst, src, ok);
    }
  }

  int tid_, code_g0_;
  int32_t code_dst_;  // the thread's code chunk's byte offset in a stage
};

}  // namespace witcert::cuda_kv
