// ResetCellBuffers (engine/backend/cell_buffers.h): each item gets its count of fresh cells, and
// a buffer from the step before is reused (its memory kept) instead of allocated anew.
#include "engine/backend/cell_buffers.h"

#include <vector>

#include "gtest/gtest.h"

namespace witcert {
namespace {

TEST(ResetCellBuffers, SizesEachItemWithFreshCells) {
  std::vector<std::vector<CellRecord>> cells;
  ResetCellBuffers(std::vector<int64_t>{3, 0, 5}, &cells);
  ASSERT_EQ(cells.size(), 3u);
  EXPECT_EQ(cells[0].size(), 3u);
  EXPECT_EQ(cells[1].size(), 0u);
  EXPECT_EQ(cells[2].size(), 5u);
  // Written cells from a step before come back value-initialized, as a new vector's would.
  for (CellRecord& c : cells[2]) {
    c.layer = 7;
    c.tv_before = 0.5f;
    c.certified = true;
    c.audited = true;
  }
  ResetCellBuffers(std::vector<int64_t>{5}, &cells);
  ASSERT_EQ(cells.size(), 1u);
  ASSERT_EQ(cells[0].size(), 5u);
  for (const CellRecord& c : cells[0]) {
    EXPECT_EQ(c.layer, 0);
    EXPECT_EQ(c.tv_before, 0.0f);
    EXPECT_FALSE(c.certified);
    EXPECT_FALSE(c.audited);
    EXPECT_EQ(c.tier, 'A');
  }
}

// A long chunk's buffer moves with the need: the next step's largest item gets it, whatever its
// index, so the memory is not allocated (and page-faulted in) again.
TEST(ResetCellBuffers, HandsTheLargestBufferToTheLargestNeed) {
  std::vector<std::vector<CellRecord>> cells;
  ResetCellBuffers(std::vector<int64_t>{10, 100000, 20}, &cells);
  const CellRecord* big = cells[1].data();
  const size_t big_capacity = cells[1].capacity();
  ResetCellBuffers(std::vector<int64_t>{5, 7, 9, 90000}, &cells);
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_EQ(cells[3].data(), big);
  EXPECT_EQ(cells[3].capacity(), big_capacity);
  EXPECT_EQ(cells[3].size(), 90000u);
  EXPECT_EQ(cells[0].size(), 5u);
  EXPECT_EQ(cells[1].size(), 7u);
  EXPECT_EQ(cells[2].size(), 9u);
  // Fewer items than buffers: the largest is still kept, the rest freed.
  ResetCellBuffers(std::vector<int64_t>{0}, &cells);
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_EQ(cells[0].data(), big);
  EXPECT_TRUE(cells[0].empty());
}

}  // namespace
}  // namespace witcert
