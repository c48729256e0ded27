// The CUDA backend's staged-block bookkeeping (engine/backend/cuda/staged_blocks.h): which stage
// a block holds, the exact-table updates that list and clear its units, and when a stage may be
// reused (never inside the step that encodes its block).
#include "engine/backend/cuda/staged_blocks.h"

#include <map>
#include <set>

#include "gtest/gtest.h"

namespace witcert {
namespace {

constexpr int32_t kLayers = 3, kHeads = 2;

// The table the updates produce, applied in order (the backend keeps the last per entry).
std::map<int64_t, int32_t> Apply(const std::vector<TableUpdate>& updates, std::map<int64_t, int32_t> table = {}) {
  for (const TableUpdate& u : updates) table[u.index] = u.value;
  return table;
}

TEST(StagedBlocks, AcquireListsEveryUnitOfTheBlockAtItsOwnSlot) {
  StagedBlocks s(/*num_blocks=*/10, kLayers, kHeads);
  std::vector<TableUpdate> up;
  const int32_t a = s.Acquire(7, &up), b = s.Acquire(2, &up);
  EXPECT_NE(a, b);
  EXPECT_EQ(s.Find(7), a);
  EXPECT_EQ(s.Find(2), b);
  EXPECT_EQ(s.Find(3), -1);
  EXPECT_EQ(s.staged(), 2);
  EXPECT_EQ(s.stages_needed(), 2);
  ASSERT_EQ(up.size(), 2u * kLayers * kHeads);
  const std::map<int64_t, int32_t> table = Apply(up);
  std::set<int32_t> slots;
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    for (int32_t h = 0; h < kHeads; ++h) {
      const int32_t sa = table.at(s.TableIndex(7, layer, h)), sb = table.at(s.TableIndex(2, layer, h));
      EXPECT_EQ(sa, (a * kLayers + layer) * kHeads + h);  // the layout exact_kv is sized by
      EXPECT_EQ(sb, (b * kLayers + layer) * kHeads + h);
      slots.insert(sa);
      slots.insert(sb);
    }
  }
  EXPECT_EQ(slots.size(), 2u * kLayers * kHeads);  // no two units share a slot
}

TEST(StagedBlocks, RetiredStageIsReusedOnlyAfterTheStep) {
  StagedBlocks s(10, kLayers, kHeads);
  std::vector<TableUpdate> up;
  const int32_t a = s.Acquire(1, &up);
  const size_t listed = up.size();
  s.Retire(1);
  EXPECT_EQ(up.size(), listed);  // the encode clears the entries, not an update (see below)
  EXPECT_EQ(s.Find(1), -1);
  EXPECT_EQ(s.staged(), 0);
  // The same step stages another block: it must not get the stage being encoded from.
  const int32_t b = s.Acquire(4, &up);
  EXPECT_NE(b, a);
  EXPECT_EQ(s.stages_needed(), 2);
  s.EndStep();
  std::vector<TableUpdate> recovered;
  s.RecoverUnfinishedStep(&recovered);  // the step finished: nothing to recover
  EXPECT_TRUE(recovered.empty());
  EXPECT_EQ(s.Acquire(5, &up), a);  // now free
  EXPECT_EQ(s.stages_needed(), 2);
}

// A step that failed after planning may not have encoded its retired blocks: the next step
// clears their entries (so no later owner of the stage is read through them) and frees them.
TEST(StagedBlocks, UnfinishedStepsRetiredBlocksAreClearedBeforeReuse) {
  StagedBlocks s(10, kLayers, kHeads);
  std::vector<TableUpdate> up;
  const int32_t a = s.Acquire(3, &up);
  s.Retire(3);  // ... and the step fails: no EndStep
  std::vector<TableUpdate> recovered;
  s.RecoverUnfinishedStep(&recovered);
  ASSERT_EQ(recovered.size(), static_cast<size_t>(kLayers * kHeads));
  const std::map<int64_t, int32_t> table = Apply(recovered, Apply(up));
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    for (int32_t h = 0; h < kHeads; ++h) EXPECT_EQ(table.at(s.TableIndex(3, layer, h)), -1);
  }
  EXPECT_EQ(s.Acquire(7, &up), a);
  recovered.clear();
  s.RecoverUnfinishedStep(&recovered);  // once only
  EXPECT_TRUE(recovered.empty());
}

TEST(StagedBlocks, DropClearsTheBlockAndFreesItsStageAtOnce) {
  StagedBlocks s(10, kLayers, kHeads);
  std::vector<TableUpdate> up;
  const int32_t a = s.Acquire(3, &up);
  std::vector<TableUpdate> drop;
  s.Drop(3, &drop);
  EXPECT_EQ(s.Find(3), -1);
  EXPECT_EQ(drop.size(), static_cast<size_t>(kLayers * kHeads));
  for (const TableUpdate& u : drop) EXPECT_EQ(u.value, -1);
  s.Drop(3, &drop);  // not staged: nothing
  s.Drop(8, &drop);
  EXPECT_EQ(drop.size(), static_cast<size_t>(kLayers * kHeads));
  // Freed between steps: the block reallocated and staged again takes the stage back, and
  // the updates in order leave its entries listed.
  const int32_t b = s.Acquire(3, &drop);
  EXPECT_EQ(b, a);
  const std::map<int64_t, int32_t> table = Apply(drop, Apply(up));
  EXPECT_EQ(table.at(s.TableIndex(3, 2, 1)), (a * kLayers + 2) * kHeads + 1);
  EXPECT_EQ(s.stages_needed(), 1);
}

// The gate's cache starting takes the slots in front: every staged block is listed again at
// its stage past the new base, and later stages follow it.
TEST(StagedBlocks, RebaseListsStagedBlocksPastTheCacheSlots) {
  StagedBlocks s(10, kLayers, kHeads);
  std::vector<TableUpdate> up;
  const int32_t a = s.Acquire(6, &up);
  s.Acquire(2, &up);
  std::vector<TableUpdate> drop;
  s.Drop(2, &drop);
  std::vector<TableUpdate> rebase;
  s.Rebase(100, &rebase);
  EXPECT_EQ(s.slot_base(), 100);
  EXPECT_EQ(s.slots_end(), 100 + 2 * kLayers * kHeads);  // two stages ever in use
  ASSERT_EQ(rebase.size(), static_cast<size_t>(kLayers * kHeads));  // block 6 only
  std::map<int64_t, int32_t> table = Apply(rebase, Apply(drop, Apply(up)));
  EXPECT_EQ(table.at(s.TableIndex(6, 1, 1)), 100 + (a * kLayers + 1) * kHeads + 1);
  EXPECT_EQ(table.at(s.TableIndex(2, 1, 1)), -1);
  const int32_t b = s.Acquire(3, &up);
  table = Apply(up, table);
  EXPECT_EQ(table.at(s.TableIndex(3, 0, 0)), 100 + b * kLayers * kHeads);
}

// A prompt in two chunks, then decode steps, as the backend plans them (block 16): what each
// step encodes from its rows, what from a stage, and what it stages.
TEST(StagedBlocks, PlanWritesFollowsBlocksThroughChunksAndDecode) {
  StagedBlocks s(20, kLayers, kHeads);
  const std::vector<int32_t> blocks = {7, 3, 9, 4, 5, 11};  // logical order
  std::vector<TableUpdate> up;
  // Chunk [0, 45) at rows 100..: blocks 7 and 3 full from the rows, block 9 staged.
  StagedBlocks::StepEncodes e;
  EXPECT_EQ(s.PlanWrites(0, 45, 16, blocks, 100, &e, &up), -1);
  EXPECT_EQ(e.row_blocks, (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(e.first_rows, (std::vector<int32_t>{100, 116}));
  EXPECT_TRUE(e.slot_blocks.empty());
  EXPECT_GE(s.Find(9), 0);
  EXPECT_EQ(s.Find(7), -1);
  s.EndStep();
  // Chunk [45, 70) at rows 0..: block 9 begun earlier and filled (from its stage), block 4 full
  // from rows 3.. (position 48), block 5 begun and staged.
  e = {};
  EXPECT_EQ(s.PlanWrites(45, 70, 16, blocks, 0, &e, &up), -1);
  EXPECT_EQ(e.slot_blocks, (std::vector<int32_t>{9}));
  EXPECT_EQ(e.row_blocks, (std::vector<int32_t>{4}));
  EXPECT_EQ(e.first_rows, (std::vector<int32_t>{3}));
  EXPECT_EQ(s.Find(9), -1);
  EXPECT_GE(s.Find(5), 0);
  s.EndStep();
  // Decode: positions 70..78 only add to block 5; 79 fills it; 80 begins block 11.
  for (int64_t pos = 70; pos < 79; ++pos) {
    e = {};
    EXPECT_EQ(s.PlanWrites(pos, pos + 1, 16, blocks, 0, &e, &up), -1);
    EXPECT_TRUE(e.row_blocks.empty() && e.slot_blocks.empty()) << pos;
    s.EndStep();
  }
  e = {};
  EXPECT_EQ(s.PlanWrites(79, 80, 16, blocks, 0, &e, &up), -1);
  EXPECT_EQ(e.slot_blocks, (std::vector<int32_t>{5}));
  s.EndStep();
  e = {};
  EXPECT_EQ(s.PlanWrites(80, 81, 16, blocks, 0, &e, &up), -1);
  EXPECT_TRUE(e.slot_blocks.empty());
  EXPECT_GE(s.Find(11), 0);
  EXPECT_EQ(s.staged(), 1);
  // The updates in order, then the encodes' clears of the filled staged blocks (9 and 5: the
  // kernel clears those, no update does), leave exactly block 11's entries listed.
  std::map<int64_t, int32_t> table = Apply(up);
  for (int32_t filled : {9, 5}) {
    for (int32_t layer = 0; layer < kLayers; ++layer) {
      for (int32_t h = 0; h < kHeads; ++h) {
        EXPECT_GE(table.at(s.TableIndex(filled, layer, h)), 0);  // listed until its encode
        table[s.TableIndex(filled, layer, h)] = -1;
      }
    }
  }
  for (const auto& [index, slot] : table) {
    const bool block11 = index / (kLayers * kHeads) == 11;
    EXPECT_EQ(slot >= 0, block11) << "entry " << index;
  }
}

// Rows that begin a block already staged (the same positions written again) encode it from
// the rows and drop the stage; rows continuing a block nobody staged are the caller's error.
TEST(StagedBlocks, PlanWritesRewritesAndReportsUnstagedBlocks) {
  StagedBlocks s(20, kLayers, kHeads);
  const std::vector<int32_t> blocks = {2, 6};
  std::vector<TableUpdate> up;
  StagedBlocks::StepEncodes e;
  EXPECT_EQ(s.PlanWrites(0, 10, 16, blocks, 0, &e, &up), -1);  // block 2 staged
  s.EndStep();
  e = {};
  EXPECT_EQ(s.PlanWrites(0, 20, 16, blocks, 0, &e, &up), -1);  // written again, now full
  EXPECT_EQ(e.row_blocks, (std::vector<int32_t>{2}));
  EXPECT_EQ(s.Find(2), -1);
  EXPECT_GE(s.Find(6), 0);
  EXPECT_EQ(Apply(up).at(s.TableIndex(2, 0, 0)), -1);
  s.EndStep();
  StagedBlocks fresh(20, kLayers, kHeads);
  e = {};
  EXPECT_EQ(fresh.PlanWrites(20, 21, 16, blocks, 0, &e, &up), 6);
}

// The outlier bypass (StagingMode::until_first_fill): blocks are staged until the first block of
// a step fills — its channels are chosen from it — and from then on, in the same step and after
// it, new blocks are encoded token by token; blocks staged before stay staged until they fill.
TEST(StagedBlocks, OutlierModeStagesUntilTheFirstFill) {
  StagedBlocks s(20, kLayers, kHeads);
  const std::vector<int32_t> a = {7, 3, 9}, b = {4, 5}, c = {8};
  std::vector<TableUpdate> up;
  StagedBlocks::StagingMode mode{.stage_new = true, .until_first_fill = true};
  StagedBlocks::StepEncodes e;
  EXPECT_EQ(s.PlanWrites(0, 10, 16, a, 0, &e, &up, &mode), -1);   // nothing fills: staged
  EXPECT_EQ(s.PlanWrites(0, 4, 16, c, 10, &e, &up, &mode), -1);
  EXPECT_TRUE(mode.stage_new);
  EXPECT_EQ(e.first_filled_block, -1);
  EXPECT_GE(s.Find(7), 0);
  EXPECT_GE(s.Find(8), 0);
  s.EndStep();
  // One step: a's staged block 7 fills from its stage (the first fill: a slot group), a's block 3
  // fills from the rows alone and 9 begins — both now token by token; b begins after the choice.
  e = {};
  EXPECT_EQ(s.PlanWrites(10, 40, 16, a, 0, &e, &up, &mode), -1);
  EXPECT_EQ(s.PlanWrites(0, 5, 16, b, 30, &e, &up, &mode), -1);
  EXPECT_FALSE(mode.stage_new);
  EXPECT_EQ(e.first_filled_block, 7);
  EXPECT_EQ(e.first_filled_row, -1);
  EXPECT_EQ(e.slot_blocks, (std::vector<int32_t>{7}));
  EXPECT_EQ(e.slot_first_pos, (std::vector<int32_t>{0}));
  EXPECT_TRUE(e.row_blocks.empty());
  EXPECT_EQ(s.Find(3), -1);
  EXPECT_EQ(s.Find(9), -1);
  EXPECT_EQ(s.Find(4), -1);
  EXPECT_EQ(s.staged(), 1);  // c's block 8, staged before the choice
  s.EndStep();
  // Later steps: b continues unstaged (no error without stage_new); c's staged block fills.
  e = {};
  EXPECT_EQ(s.PlanWrites(5, 6, 16, b, 0, &e, &up, &mode), -1);
  EXPECT_EQ(s.PlanWrites(4, 16, 16, c, 1, &e, &up, &mode), -1);
  EXPECT_EQ(e.slot_blocks, (std::vector<int32_t>{8}));
  EXPECT_EQ(s.staged(), 0);
  // A first fill from rows alone names its row.
  StagedBlocks fresh(20, kLayers, kHeads);
  StagedBlocks::StagingMode fresh_mode{.stage_new = true, .until_first_fill = true};
  e = {};
  EXPECT_EQ(fresh.PlanWrites(0, 40, 16, a, 50, &e, &up, &fresh_mode), -1);
  EXPECT_EQ(e.first_filled_block, 7);
  EXPECT_EQ(e.first_filled_row, 50);
  EXPECT_EQ(e.row_blocks, (std::vector<int32_t>{7}));  // block 3 after the choice: token by token
  EXPECT_EQ(fresh.staged(), 0);
}

}  // namespace
}  // namespace witcert
