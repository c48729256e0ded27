// The step's certificate cell vectors, sized per item and reused from step to step.
//
// Why: a metered prompt chunk returns a cell per (row, layer, head): 2M CellRecords (112 MiB) for
// a 2048-row chunk of an 8B model. A fresh vector that size is a fresh mapping that each step
// page-faults in again. On the dev host, sizing it took 57–60 ms per chunk, against 5–6 ms to
// re-zero a buffer kept from the step before (bench_risk_records alloc, bench/RESULTS.md). The engine keeps its ForwardResult across steps; a backend sizes
// the cells through ResetCellBuffers, which hands the largest kept buffer to the largest need.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "engine/cert/records.h"

namespace witcert {

// cells[i] becomes counts[i] value-initialized CellRecords (as a fresh vector's would be), i <
// counts.size(). The vectors cells held before are reused by capacity: the largest to the item
// with the most cells (ties in item order); buffers left over are freed.
inline void ResetCellBuffers(absl::Span<const int64_t> counts, std::vector<std::vector<CellRecord>>* cells) {
  std::vector<std::vector<CellRecord>> kept = std::move(*cells);
  std::stable_sort(kept.begin(), kept.end(),
                   [](const auto& a, const auto& b) { return a.capacity() > b.capacity(); });
  std::vector<size_t> order(counts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return counts[a] > counts[b]; });
  cells->clear();
  cells->resize(counts.size());
  for (size_t k = 0; k < order.size(); ++k) {
    std::vector<CellRecord>& v = (*cells)[order[k]];
    if (k < kept.size()) {
      v = std::move(kept[k]);
      v.clear();
    }
    v.resize(static_cast<size_t>(counts[order[k]]));
  }
}

}  // namespace witcert
