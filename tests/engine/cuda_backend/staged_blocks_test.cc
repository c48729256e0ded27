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
  ASSERT_EQ(rebase.size(), static_cast<size_t>(kLayers * kHeads));  // block 6 only
  std::map<int64_t, int32_t> table = Apply(rebase, Apply(drop, Apply(up)));
  EXPECT_EQ(table.at(s.TableIndex(6, 1, 1)), 100 + (a * kLayers + 1) * kHeads + 1);
  EXPECT_EQ(table.at(s.TableIndex(2, 1, 1)), -1);
  const int32_t b = s.Acquire(3, &up);
  table = Apply(up, table);
  EXPECT_EQ(table.at(s.TableIndex(3, 0, 0)), 100 + b * kLayers * kHeads);
}

}  // namespace
}  // namespace witcert
