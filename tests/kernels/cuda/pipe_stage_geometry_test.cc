// The pipelined decode kernel's stage geometry (kernels/cuda/pipe_stage_geometry.h), checked on the
// CPU: kivi2's key parameters are staged once per paged block, in the slot KeyParamSlot names, and
// the K pass reads every token's parameters from that slot. A wrong slot would decode a token with
// another block's zeros and scales, which no device run would be needed to see.
#include "gtest/gtest.h"
#include "kernels/cuda/pipe_stage_geometry.h"

namespace witcert::cuda_kv {
namespace {

TEST(PipeStageGeometry, KeyParamSlotIsTheBlocksFirstGroupOfTheStage) {
  for (int block_size = 8; block_size <= 512; block_size *= 2) {
    SCOPED_TRACE(block_size);
    const int stages = 2 * (block_size > kStageTokens ? block_size / kStageTokens : 1) + 1;
    for (int stage = 0; stage < stages; ++stage) {
      const int first = stage * kStageTokens;  // stages are aligned to absolute positions
      auto block_of = [&](int grp) { return (first + 8 * grp) / block_size; };
      for (int grp = 0; grp < kStageGroups; ++grp) {
        const int slot = KeyParamSlot(grp, block_size);
        ASSERT_GE(slot, 0);
        // Not after the group: a split starts on a stage, so the slot is in the split with it.
        ASSERT_LE(slot, grp);
        EXPECT_EQ(block_of(slot), block_of(grp)) << "stage " << stage << " group " << grp;
        for (int earlier = 0; earlier < slot; ++earlier) {
          EXPECT_NE(block_of(earlier), block_of(grp)) << "stage " << stage << " group " << grp;
        }
        // The loader fills only slots that name themselves; every group reads one of those.
        EXPECT_EQ(KeyParamSlot(slot, block_size), slot);
      }
    }
  }
}

TEST(PipeStageGeometry, OneSlotPerBlockOfTheStage) {
  for (int block_size = 8; block_size <= 512; block_size *= 2) {
    int filled = 0;
    for (int grp = 0; grp < kStageGroups; ++grp) filled += KeyParamSlot(grp, block_size) == grp ? 1 : 0;
    EXPECT_EQ(filled, block_size >= kStageTokens ? 1 : kStageTokens / block_size) << block_size;
  }
}

}  // namespace
}  // namespace witcert::cuda_kv
