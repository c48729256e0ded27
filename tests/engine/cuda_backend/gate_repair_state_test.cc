// The GPU gate's host bookkeeping (engine/backend/cuda/gate_repair_state.h): the pinned store's
// entry policy (the CPU BackingStore's) and the exact-block cache's slots and table updates.
#include "engine/backend/cuda/gate_repair_state.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace witcert {
namespace {

TEST(ExactEntryTable, TakesFreeEntriesThenEvictsOldestFinishedThenRefuses) {
  ExactEntryTable t(/*num_entries=*/2, /*num_blocks=*/8);
  for (int32_t b : {0, 1, 2, 3}) t.OnAllocate(b);
  const int32_t e0 = t.Acquire(0), e1 = t.Acquire(1);
  EXPECT_GE(e0, 0);
  EXPECT_GE(e1, 0);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(t.Acquire(0), e0);  // idempotent
  EXPECT_EQ(t.Acquire(2), -1);  // full, nothing finished: refused
  EXPECT_EQ(t.refused(), 1);
  EXPECT_EQ(t.Acquire(2), -1);  // stays refused for this owner, counted once
  EXPECT_EQ(t.refused(), 1);
  t.OnFinished(1);
  t.OnFinished(0);
  EXPECT_EQ(t.Acquire(3), e1);  // block 1 finished first: its entry goes
  EXPECT_EQ(t.Find(1), -1);
  EXPECT_EQ(t.evicted(), 1);
  EXPECT_EQ(t.Find(0), e0);
  t.OnAllocate(0);  // reallocated: the old owner's entry is released, not evictable twice
  EXPECT_EQ(t.Find(0), -1);
  EXPECT_EQ(t.used(), 1);
  t.OnAllocate(2);  // a refused block gets a new chance with its new owner
  EXPECT_EQ(t.Acquire(2), e0);
  EXPECT_EQ(t.evicted(), 1);  // the stale finished record of block 0 evicts nothing
}

TEST(ExactEntryTable, ZeroEntriesRefusesEverything) {
  ExactEntryTable t(0, 4);
  t.OnAllocate(1);
  EXPECT_EQ(t.Acquire(1), -1);
  EXPECT_EQ(t.used(), 0);
}

TEST(ExactSlotCache, EvictsLeastRecentlyPromotedAndReportsTableUpdates) {
  ExactSlotCache c(/*capacity=*/2, /*num_layers=*/3, /*num_kv_heads=*/2);
  std::vector<TableUpdate> up;
  const int32_t s0 = c.Insert(4, 1, 0, /*owner=*/7, &up);
  const int32_t s1 = c.Insert(5, 1, 1, 7, &up);
  EXPECT_TRUE(up.empty());  // the page-in kernel sets new entries
  EXPECT_NE(s0, s1);
  EXPECT_EQ(c.Find(4, 1, 0), s0);
  EXPECT_EQ(c.Find(4, 2, 0), -1);
  EXPECT_EQ(c.Resident(7, 1), 2);
  EXPECT_EQ(c.Resident(7, 0), 0);
  const int32_t s2 = c.Insert(6, 2, 0, 9, &up);  // evicts (4, 1, 0)
  EXPECT_EQ(s2, s0);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].index, c.TableIndex(4, 1, 0));
  EXPECT_EQ(up[0].value, -1);
  EXPECT_EQ(c.evictions(), 1);
  EXPECT_EQ(c.Resident(7, 1), 1);
  EXPECT_EQ(c.Resident(9, 2), 1);
  up.clear();
  c.InvalidateBlock(5, &up);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].index, c.TableIndex(5, 1, 1));
  EXPECT_EQ(c.Resident(7, 1), 0);
  EXPECT_EQ(c.size(), 1);
  up.clear();
  c.InvalidateBlock(4, &up);  // already evicted: nothing
  EXPECT_TRUE(up.empty());
  // Every slot handed out is distinct while cached.
  std::set<int32_t> live = {c.Find(6, 2, 0)};
  live.insert(c.Insert(1, 0, 0, 3, &up));
  EXPECT_EQ(live.size(), 2u);
  EXPECT_EQ(c.TableIndex(6, 2, 1), (6 * 3 + 2) * 2 + 1);
}

TEST(ExactSlotCache, ZeroCapacityCachesNothing) {
  ExactSlotCache c(0, 2, 2);
  std::vector<TableUpdate> up;
  EXPECT_EQ(c.Insert(1, 0, 0, 1, &up), -1);
  EXPECT_EQ(c.size(), 0);
}

// The device applies a list of table updates in parallel, so each entry must appear once: its
// last update in list order, the lists' order otherwise kept.
TEST(LastUpdatePerEntry, KeepsEachEntrysLastUpdateInOrder) {
  std::vector<TableUpdate> pending = {{.index = 4, .value = 1}, {.index = 9, .value = 2}, {.index = 4, .value = -1},
                                      {.index = 7, .value = 3}, {.index = 9, .value = 5}};
  const std::vector<TableUpdate> out = LastUpdatePerEntry(&pending);
  EXPECT_TRUE(pending.empty());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].index, 4);
  EXPECT_EQ(out[0].value, -1);
  EXPECT_EQ(out[1].index, 7);
  EXPECT_EQ(out[1].value, 3);
  EXPECT_EQ(out[2].index, 9);
  EXPECT_EQ(out[2].value, 5);
}

}  // namespace
}  // namespace witcert
