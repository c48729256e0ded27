// The pipelined decode kernel's stage loader (metered_decode_pipelined.cuh): stage k of the
// split's global stage sequence into ring slot k % S by cp.async, K stages (k < n_st) then V
// stages, one commit group per call.
//  * Codes: a thread copies the same 16-byte chunk r of every GPI-th 8-token group, so its chunk,
//    source column and swizzled destination are fixed at construction; a stage then costs it one
//    group-table read, one wide multiply and the copy per chunk (the loader had been most of the
//    kernel's instructions, ncu: bench/RESULTS.md sixteenth session).
//  * Scales (scaled codecs) with every stage (kivi2: each value's (zero, scale) with the V stages);
//    kivi2's K stages carry the key group parameters of each block instead (KPB bytes, KeyParamSlot);
//    scaled fp8 and kivi2 on tensor cores (VSCALE_MAX) copy the V scales (kivi2: the pairs) with the
//    K stages too, into the stage's K-scale slot (free there), for their maximum.
//  * V stages with the meter: Tier B's K scales (KSCALE) and the witness chunks (WIT,
//    WitnessChunkOf, below): chunk ci by thread ci (and ci + kThreads, … for a large B). B = 8 takes the
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

// The meter's witness bytes of one V stage as cp.async chunks: per 8-token group, the key band
// codes (8·B bytes: 16-byte chunks, 8-byte ones for odd B), the units (16 bytes) and the value
// summaries (32 bytes); ci < WitnessChunksPerStage(B) names one chunk. Source and destination
// are fixed per chunk but for the group's first vector index v: src + v·src_per_vector.
struct WitnessChunk {
  int32_t grp = 0;             // 8-token group of the stage
  int32_t dst = 0;             // byte offset in the stage
  int32_t src_per_vector = 0;  // source bytes per vector
  int32_t bytes = 16;          // 8 or 16
  const uint8_t* src = nullptr;
};
__host__ __device__ inline int WitnessChunksPerStage(int nb) {
  return kStageGroups * ((nb & 1) != 0 ? nb : nb / 2) + 3 * kStageGroups;
}
__host__ __device__ inline WitnessChunk WitnessChunkOf(int ci, int nb, const StageLayout& sl, const uint8_t* k_witness,
                                                     const void* k_witness_unit, const void* v_summary) {
  const bool odd = (nb & 1) != 0;
  const int cw = odd ? 8 : 16, cpg = odd ? nb : nb / 2;  // code chunk bytes, chunks per group (8·B / cw)
  const int ncode = kStageGroups * cpg;
  WitnessChunk c;
  if (ci < ncode) {
    const int r = ci % cpg;
    c.grp = ci / cpg;
    c.dst = sl.kwit + c.grp * 8 * nb + r * cw;
    c.src_per_vector = nb;
    c.bytes = cw;
    c.src = k_witness + r * cw;
  } else {
    const int c2 = ci - ncode, r = c2 % 3;  // r 0: units, 1-2: summaries
    c.grp = c2 / 3;
    if (r == 0) {
      c.dst = sl.kunit + c.grp * 16;
      c.src_per_vector = 2;
      c.src = static_cast<const uint8_t*>(k_witness_unit);
    } else {
      c.dst = sl.vsum + c.grp * 32 + (r - 1) * 16;
      c.src_per_vector = 4;
      c.src = static_cast<const uint8_t*>(v_summary) + (r - 1) * 16;
    }
  }
  return c;
}

// Where a stage row's 16-byte code chunks go: in place, or swizzled for the tensor-core passes.
enum class StageSwizzle {
  kNone,
  kTc,   // fp16 / bf16 at d = 128 (CB = 256): chunk c of token t at c ^ (t % 8)
  kTc8,  // fp8-e4m3 at d = 128 (CB = 128): chunk c of token t at c ^ Tc8Swizzle(t % 8)
};

// CB: code bytes per vector; NS: scales per vector (0: none); S: ring stages; KPB: key group
// parameter bytes per (block, KV head) (kivi2; 0: none).
template <int CB, int NS, int S, StageSwizzle SWIZZLE, bool VSCALE_MAX, bool KSCALE, bool WIT, int KPB = 0>
class PipeStageLoader {
 public:
  static constexpr int kChunksPerGroup = CB / 2;  // 16-byte code chunks per 8-token group
  static_assert(kThreads % kChunksPerGroup == 0, "every thread copies one fixed chunk of its groups");
  static constexpr int kGroupsPerPass = kThreads / kChunksPerGroup;  // groups one pass of the CTA covers
  static constexpr int kCodePasses = kGroupsPerPass >= kStageGroups ? 1 : kStageGroups / kGroupsPerPass;

  // bs_shift: log2(block_size) (read with KPB > 0 alone).
  __device__ PipeStageLoader(const StageLayout& sl, int tid, int bs_shift = 0)
      : tid_(tid), code_g0_(tid / kChunksPerGroup), bs_shift_(bs_shift) {
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
          bool ok;
          CpAsync16(st + code_dst_ + i * kGroupsPerPass * 8 * CB, GroupSource(sg, grp, csrc, CB, &ok), ok);
        }
      }
      if constexpr (NS > 0) {
        if (KPB == 0 || isv) CopyScales(sg, st + sl.scales, reinterpret_cast<const uint8_t*>(isv ? kv.v_scales : kv.k_scales));
      }
      if constexpr (KPB > 0) {
        if (!isv) CopyKeyParams(sg, st + sl.kparams, reinterpret_cast<const uint8_t*>(kv.k_group));
      }
      if constexpr (VSCALE_MAX) {  // the V scale words (NS bf16, or kivi2's fp16 pair), 16·NS bytes a group
        static_assert(NS == 1 || NS == 2, "one bf16 scale or one fp16 pair a vector");
        if (!isv && tid_ < kStageGroups * NS) {
          bool ok;
          CpAsync16(st + sl.kscales + tid_ * 16,
                    GroupSource(sg, tid_ / NS, reinterpret_cast<const uint8_t*>(kv.v_scales), 2 * NS, &ok) +
                        (tid_ % NS) * 16,
                    ok);
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
  // Group grp's first vector in `base` (per_vector bytes a vector) and *ok whether the group is
  // in the split; outside it, base itself (the copy then zero-fills and reads nothing).
  __device__ __forceinline__ static const uint8_t* GroupSource(const int32_t* sg, int grp, const uint8_t* base,
                                                              int per_vector, bool* ok) {
    const int32_t v = sg[grp];
    *ok = v != kGroupOutside;
    return base + static_cast<int64_t>(*ok ? v : 0) * per_vector;
  }
  // The stage's NS bf16 scales per vector, 16 bytes per 8-token group and scale, from src.
  __device__ __forceinline__ void CopyScales(const int32_t* sg, uint8_t* dst, const uint8_t* src) const {
    for (int ci = tid_; ci < kStageGroups * NS; ci += kThreads) {
      const int grp = ci / NS, r = ci % NS;
      bool ok;
      CpAsync16(dst + grp * 16 * NS + r * 16, GroupSource(sg, grp, src, 2 * NS, &ok) + r * 16, ok);
    }
  }
  // kivi2: each block's key group parameters, 16 bytes a copy, into the slot of the block's first
  // group of the stage (KeyParamSlot). A split starts on a stage, so a block with a group in the
  // split has its first group of the stage there too.
  __device__ __forceinline__ void CopyKeyParams(const int32_t* sg, uint8_t* dst, const uint8_t* src) const {
    constexpr int kChunks = KPB / 16;
    static_assert(KPB % 16 == 0, "16-byte chunks");
    for (int ci = tid_; ci < kStageGroups * kChunks; ci += kThreads) {
      const int grp = ci / kChunks, r = ci % kChunks;
      if (KeyParamSlot(grp, 1 << bs_shift_) != grp) continue;
      const int32_t v = sg[grp];
      const bool ok = v != kGroupOutside;
      const int64_t unit = ok ? (v >> bs_shift_) : 0;  // block·Hkv + head
      CpAsync16(dst + grp * KPB + r * 16, src + unit * KPB + r * 16, ok);
    }
  }
  __device__ __forceinline__ static void CopyWitnessChunk(const WitnessChunk& c, uint8_t* st, const int32_t* sg) {
    bool ok;
    const uint8_t* src = GroupSource(sg, c.grp, c.src, c.src_per_vector, &ok);
    if (c.bytes == 8) {
      CpAsync8(st + c.dst, src, ok);
    } else {
      CpAsync16(st + c.dst, src, ok);
    }
  }

  int tid_, code_g0_, bs_shift_;
  int32_t code_dst_;  // the thread's code chunk's byte offset in a stage
};

}  // namespace witcert::cuda_kv
