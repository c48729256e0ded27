// What the meter records: one CellRecord per (layer, query head, step), a per-request
// RiskSummary (certificates.md §7), thread-safe per-(layer, head) counters for metrics, and
// an optional JSONL trace (one line per cell).
#pragma once

#include <array>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace witcert {

struct CellRecord {
  int32_t layer = 0;
  int32_t head = 0;
  int64_t step = 0;
  float tv_before = 0.0f, tv_after = 0.0f;  // TV bound before / after the gate
  float v_before = 0.0f, v_after = 0.0f;    // ‖o − õ‖ bound relative to ‖õ‖
  int32_t pageins = 0;
  bool certified = false;  // after the gate
  char tier = 'A';         // 'B' when the Tier B dither bound was in use
  // Audit (shadow) mode: filled when the cell was sampled.
  bool audited = false;
  float true_tv = 0.0f, true_v = 0.0f;  // true TV and relative output error
  bool violation = false;               // a true value above its bound
};

struct RiskSummary {
  int64_t cells = 0;
  double max_tv_before = 0, mean_tv_before = 0, max_tv_after = 0, mean_tv_after = 0;
  double coverage = 0;          // fraction certified without repair
  int64_t pageins = 0;
  int64_t uncertified_cells = 0;
  double delta_spent = 0;       // Σ δ_loc over Tier B cells
  std::vector<std::pair<int32_t, int32_t>> uncertified_heads;  // (layer, head), unique
};

// The summary of several requests' cells as one (a response's n choices): counts and page-ins
// add, maxima take the largest, means and coverage are weighted by cells, δ spent adds (a
// union bound over the choices), and the uncertified heads are the union in first-seen order.
RiskSummary MergeRiskSummaries(absl::Span<const RiskSummary> parts);

// Folds cells into a RiskSummary (not thread-safe: one per request). O(1) per cell: a step of
// a long request adds layers × heads cells, most of them uncertified on a 2-bit store, so the
// uncertified heads are deduplicated through a (layer, head) bitmap, not a search of the list.
class RiskAccumulator {
 public:
  // `tv_threshold` decides "certified without repair": tv_before ≤ threshold.
  void Add(const CellRecord& cell, double delta_loc, float tv_threshold);
  RiskSummary Summary() const;

 private:
  RiskSummary s_;
  double sum_before_ = 0, sum_after_ = 0;
  int64_t certified_first_ = 0;
  std::vector<std::vector<bool>> head_listed_;  // [layer][head]: in s_.uncertified_heads
};

// Per-(layer, head) aggregates for Prometheus; bounded size, thread-safe. Includes the
// histogram of TV bounds before the gate, so metrics read one snapshot per scrape instead of
// every front end observing every cell of its requests.
class RiskCounters {
 public:
  // Finite upper bounds of the TV-bound histogram (le semantics; +Inf is the last bucket).
  static constexpr std::array<double, 12> kTvBucketBounds = {
      1e-6, 1e-5, 1e-4, 1e-3, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0};
  static constexpr size_t kTvBuckets = kTvBucketBounds.size() + 1;

  RiskCounters(int32_t num_layers, int32_t num_heads);
  void Add(const CellRecord& cell, float tv_threshold);
  // The same as Add for each cell, under one lock (a step adds layers × heads × rows cells).
  void AddAll(absl::Span<const CellRecord> cells, float tv_threshold);
  struct Counts {
    int64_t cells = 0, certified_first = 0, uncertified = 0, pageins = 0;
    int64_t audited = 0, violations_tier_a = 0, violations_tier_b = 0;
    std::array<uint64_t, kTvBuckets> tv_buckets{};  // per bucket, not cumulative
    double tv_sum = 0.0;                            // Σ tv_before
    Counts& operator+=(const Counts& o);
  };
  Counts Get(int32_t layer, int32_t head) const;
  Counts Total() const;

 private:
  void AddLocked(const CellRecord& cell, float tv_threshold) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t num_layers_, num_heads_;
  mutable absl::Mutex mu_;
  std::vector<Counts> counts_ ABSL_GUARDED_BY(mu_);  // [layers, heads]
};

// One JSON object per line per cell.
class TraceWriter {
 public:
  static absl::Status Open(const std::string& path, std::unique_ptr<TraceWriter>* out);
  void Write(int64_t request_id, const CellRecord& cell);

 private:
  absl::Mutex mu_;
  std::ofstream out_ ABSL_GUARDED_BY(mu_);
};

}  // namespace witcert
