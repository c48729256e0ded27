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
  std::vector<TableUpdate> up, after;
  const int32_t a = s.Acquire(1, &up);
  s.Retire(1, &after);
  EXPECT_EQ(s.Find(1), -1);
  EXPECT_EQ(s.staged(), 0);
  // The same step stages another block: it must not get the stage being encoded from.
  const int32_t b = s.Acquire(4, &up);
  EXPECT_NE(b, a);
  EXPECT_EQ(s.stages_needed(), 2);
  // The retire's updates clear block 1's entries.
  const std::map<int64_t, int32_t> table = Apply(after, Apply(up));
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    for (int32_t h = 0; h < kHeads; ++h) {
      EXPECT_EQ(table.at(s.TableIndex(1, layer, h)), -1);
      EXPECT_GE(table.at(s.TableIndex(4, layer, h)), 0);
    }
  }
  s.EndStep();
  EXPECT_EQ(s.Acquire(5, &up), a);  // now free
  EXPECT_EQ(s.stages_needed(), 2);
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

}  // namespace
}  // namespace witcert
