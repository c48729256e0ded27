// RiskCounters: per-(layer, head) counts and the TV-bound histogram, one cell at a time and
// in batches (AddAll must equal Add cell by cell), bucket edges (le semantics, NaN → +Inf),
// out-of-range cells ignored, and Total() summing every field.
#include "engine/cert/records.h"

#include <cmath>
#include <algorithm>
#include <random>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace witcert {
namespace {

CellRecord Cell(int32_t layer, int32_t head, float tv, bool certified = true) {
  CellRecord c;
  c.layer = layer;
  c.head = head;
  c.tv_before = c.tv_after = tv;
  c.certified = certified;
  return c;
}

TEST(RiskCountersTest, HistogramBucketsUseLeSemantics) {
  RiskCounters k(2, 3);
  const auto& b = RiskCounters::kTvBucketBounds;
  k.Add(Cell(1, 2, 0.0f), 0.05f);                                  // bucket 0
  k.Add(Cell(1, 2, static_cast<float>(b[0])), 0.05f);              // on the edge: bucket 0
  k.Add(Cell(1, 2, std::nextafter(static_cast<float>(b[0]), 1.0f)), 0.05f);  // bucket 1
  k.Add(Cell(1, 2, 0.05f), 0.05f);                                 // le 0.05
  k.Add(Cell(1, 2, 2.0f, false), 0.05f);                           // +Inf
  k.Add(Cell(1, 2, std::numeric_limits<float>::quiet_NaN(), false), 0.05f);  // +Inf
  const RiskCounters::Counts c = k.Get(1, 2);
  EXPECT_EQ(c.cells, 6);
  EXPECT_EQ(c.tv_buckets[0], 2u);
  EXPECT_EQ(c.tv_buckets[1], 1u);
  size_t le_005 = 0;
  while (b[le_005] < 0.05) ++le_005;
  EXPECT_EQ(c.tv_buckets[le_005], 1u);
  EXPECT_EQ(c.tv_buckets[RiskCounters::kTvBuckets - 1], 2u);
  EXPECT_EQ(c.certified_first, 4);  // tv ≤ 0.05
  EXPECT_EQ(c.uncertified, 2);
  uint64_t total = 0;
  for (uint64_t n : c.tv_buckets) total += n;
  EXPECT_EQ(total, 6u);
  EXPECT_EQ(k.Get(0, 0).cells, 0);
}

TEST(RiskCountersTest, AddAllEqualsAddAndTotalSumsEverything) {
  std::vector<CellRecord> cells;
  for (int32_t l = 0; l < 3; ++l) {
    for (int32_t h = 0; h < 4; ++h) {
      CellRecord c = Cell(l, h, 1e-4f * static_cast<float>(1 + l * 7 + h * h * 13), h != 2);
      c.pageins = h;
      c.audited = l == 1;
      c.violation = l == 1 && h == 3;
      c.tier = h % 2 ? 'B' : 'A';
      cells.push_back(c);
    }
  }
  cells.push_back(Cell(7, 0, 0.5f));   // layer out of range: ignored
  cells.push_back(Cell(0, -1, 0.5f));  // head out of range: ignored
  RiskCounters one(3, 4), batch(3, 4);
  for (const CellRecord& c : cells) one.Add(c, 2e-3f);
  batch.AddAll(cells, 2e-3f);
  for (int32_t l = 0; l < 3; ++l) {
    for (int32_t h = 0; h < 4; ++h) {
      const auto a = one.Get(l, h), b = batch.Get(l, h);
      EXPECT_EQ(a.cells, b.cells);
      EXPECT_EQ(a.certified_first, b.certified_first);
      EXPECT_EQ(a.uncertified, b.uncertified);
      EXPECT_EQ(a.pageins, b.pageins);
      EXPECT_EQ(a.tv_buckets, b.tv_buckets);
      EXPECT_DOUBLE_EQ(a.tv_sum, b.tv_sum);
    }
  }
  const auto t = batch.Total();
  EXPECT_EQ(t.cells, 12);
  EXPECT_EQ(t.uncertified, 3);  // h == 2 in each layer
  EXPECT_EQ(t.pageins, 3 * (0 + 1 + 2 + 3));
  EXPECT_EQ(t.audited, 4);
  EXPECT_EQ(t.violations_tier_b, 1);  // l 1, h 3 is tier B
  EXPECT_EQ(t.violations_tier_a, 0);
  double sum = 0;
  for (size_t i = 0; i < 12; ++i) sum += cells[i].tv_before;
  EXPECT_NEAR(t.tv_sum, sum, 1e-12);
  uint64_t n = 0;
  for (uint64_t c : t.tv_buckets) n += c;
  EXPECT_EQ(n, 12u);
}

// Merging the summaries of a request's choices gives what one accumulator over all their
// cells gives: sums, maxima, cell-weighted means and coverage, δ spent, the union of heads.
TEST(RiskSummaryTest, MergeEqualsOneAccumulatorOverAllCells) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> tv(0.0f, 0.2f);
  std::vector<RiskAccumulator> parts(3);
  RiskAccumulator all;
  for (size_t p = 0; p < parts.size(); ++p) {
    for (int i = 0; i < 40 + 7 * static_cast<int>(p); ++i) {
      CellRecord c;
      c.layer = static_cast<int32_t>(rng() % 4);
      c.head = static_cast<int32_t>(rng() % 3);
      c.tv_before = tv(rng);
      c.tv_after = c.tv_before * 0.5f;
      c.pageins = static_cast<int32_t>(rng() % 3);
      c.certified = c.tv_after <= 0.05f;
      c.tier = rng() % 2 ? 'B' : 'A';
      parts[p].Add(c, 1e-4, 0.05f);
      all.Add(c, 1e-4, 0.05f);
    }
  }
  std::vector<RiskSummary> summaries;
  for (const RiskAccumulator& a : parts) summaries.push_back(a.Summary());
  const RiskSummary m = MergeRiskSummaries(summaries), want = all.Summary();
  EXPECT_EQ(m.cells, want.cells);
  EXPECT_EQ(m.max_tv_before, want.max_tv_before);
  EXPECT_EQ(m.max_tv_after, want.max_tv_after);
  EXPECT_NEAR(m.mean_tv_before, want.mean_tv_before, 1e-12);
  EXPECT_NEAR(m.mean_tv_after, want.mean_tv_after, 1e-12);
  EXPECT_NEAR(m.coverage, want.coverage, 1e-12);
  EXPECT_EQ(m.pageins, want.pageins);
  EXPECT_EQ(m.uncertified_cells, want.uncertified_cells);
  EXPECT_NEAR(m.delta_spent, want.delta_spent, 1e-15);
  EXPECT_EQ(m.uncertified_heads, want.uncertified_heads);
  EXPECT_GT(want.uncertified_cells, 0);  // the case exercises the union
  const RiskSummary none = MergeRiskSummaries({});
  EXPECT_EQ(none.cells, 0);
  EXPECT_EQ(none.coverage, 0.0);
}

// The uncertified heads: each (layer, head) once, in the order first seen, whatever the order
// and size of the indices (heads listed before lower layers, a layer first seen at a high
// head), against a plain search of the list.
TEST(RiskSummaryTest, UncertifiedHeadsAreUniqueInFirstSeenOrder) {
  std::mt19937 rng(5);
  RiskAccumulator acc;
  std::vector<std::pair<int32_t, int32_t>> want;
  for (int i = 0; i < 5000; ++i) {
    CellRecord c;
    c.layer = static_cast<int32_t>(rng() % 40);
    c.head = static_cast<int32_t>(rng() % (c.layer % 3 == 0 ? 64 : 8));
    c.tv_before = c.tv_after = 0.3f;
    c.certified = rng() % 4 == 0;
    acc.Add(c, 0.0, 0.05f);
    const auto key = std::make_pair(c.layer, c.head);
    if (!c.certified && std::find(want.begin(), want.end(), key) == want.end()) want.push_back(key);
  }
  const RiskSummary s = acc.Summary();
  EXPECT_EQ(s.uncertified_heads, want);
  EXPECT_GT(want.size(), 300u);
  EXPECT_EQ(MergeRiskSummaries({s, s}).uncertified_heads, want);  // the union of one list with itself
}

}  // namespace
}  // namespace witcert
