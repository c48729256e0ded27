// The pipelined decode kernel's stage geometry (metered_decode_pipelined.cuh, pipe_stage.cuh),
// host-callable so tests/kernels/cuda/pipe_stage_geometry_test.cc checks it on the CPU.
//
// A stage is 64 tokens aligned to absolute positions, eight 8-token groups; a group lies in one
// paged block (block_size ≥ 8, a power of two).
#pragma once

#include "kernels/meter/hd.h"

namespace witcert::cuda_kv {

inline constexpr int kStageTokens = 64;
inline constexpr int kStageGroups = kStageTokens / 8;  // 8-token groups: one block each (block_size ≥ 8)

// kivi2's key group parameters in a K stage: one copy per paged block, in the slot of the block's
// first group of the stage. Blocks and stages are both aligned (block_size and 64 powers of two),
// so a stage holds 64 / block_size whole blocks or lies inside one block. The slot of group grp:
WITCERT_HD constexpr int KeyParamSlot(int grp, int block_size) {
  const int groups_per_block = block_size >= kStageTokens ? kStageGroups : block_size / 8;
  return grp & ~(groups_per_block - 1);
}

}  // namespace witcert::cuda_kv
