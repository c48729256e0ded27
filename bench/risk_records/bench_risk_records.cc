// Host cost of the meter's records per decode step, as the engine's loop pays it
// (engine/runtime/engine.cc): every cell of every running request into its RiskAccumulator,
// then the step's cells into the per-(layer, head) RiskCounters for Prometheus.
//
// Usage: bench_risk_records [layers=32] [heads=32] [requests=16] [steps=64] [uncertified=1.0]
//        bench_risk_records alloc [layers=32] [heads=32] [rows=2048] [steps=8]
// The second form times what a metered prompt chunk of `rows` rows costs the host before the
// engine reads its cells: the step's CellRecord vector sized (value-initialized, as a backend sizes
// it) and filled, first as a fresh vector each step, then through ResetCellBuffers
// (engine/backend/cell_buffers.h), which reuses the step before's buffer: side by side, one run.
// The shape defaults to an 8B model's (32 layers × 32 query heads) at batch 16; `uncertified`
// is the share of cells the gate leaves uncertified (a 2-bit store at the default threshold:
// all of them). Prints the median ms per step over `steps` steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cell_buffers.h"
#include "engine/cert/records.h"

namespace {

double Median(std::vector<double> ms) {
  return ms[ms.size() / 2];
}

// One chunk's cells filled as a backend fills them.
void FillChunkCells(std::vector<witcert::CellRecord>& cells, int rows, int heads, int step) {
  for (size_t i = 0; i < cells.size(); ++i) {
    witcert::CellRecord& c = cells[i];
    c.layer = static_cast<int32_t>(i / (static_cast<size_t>(rows) * heads));
    c.head = static_cast<int32_t>(i % heads);
    c.step = step;
    c.tv_before = c.tv_after = 0.01f * static_cast<float>(i % 7);
    c.certified = c.tv_before <= 0.05f;
  }
}

// Median ms per step to size and fill one chunk's cells (and to size them alone), each step's
// cells in a fresh vector (reuse = false) or through ResetCellBuffers.
void TimeChunkCells(int layers, int heads, int rows, int steps, bool reuse) {
  using witcert::CellRecord;
  const int64_t n = int64_t{layers} * heads * rows;
  std::vector<std::vector<CellRecord>> kept;
  std::vector<double> size_ms, total_ms;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<CellRecord>> fresh;
    std::vector<std::vector<CellRecord>>& cells = reuse ? kept : fresh;
    if (reuse) {
      witcert::ResetCellBuffers(std::vector<int64_t>{n}, &cells);
    } else {
      cells.assign(1, {});  // as the backends sized cells before (BuildCells)
      cells[0].resize(static_cast<size_t>(n));
    }
    const auto t1 = std::chrono::steady_clock::now();
    FillChunkCells(cells[0], rows, heads, s);
    const auto t2 = std::chrono::steady_clock::now();
    size_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    total_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
  }
  std::printf("| %s | %d | %.1f | %.1f | %.1f |\n", reuse ? "ResetCellBuffers (kept)" : "fresh vector", rows,
              n * sizeof(CellRecord) / 1048576.0, Median(size_ms), Median(total_ms));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "alloc") {
    const int layers = argc > 2 ? std::atoi(argv[2]) : 32;
    const int heads = argc > 3 ? std::atoi(argv[3]) : 32;
    const int rows = argc > 4 ? std::atoi(argv[4]) : 2048;
    const int steps = argc > 5 ? std::atoi(argv[5]) : 8;
    if (layers <= 0 || heads <= 0 || rows <= 0 || steps <= 0) {
      std::fprintf(stderr, "usage: bench_risk_records alloc [layers] [heads] [rows] [steps]\n");
      return 2;
    }
    std::printf("| cells | chunk rows | MiB | size (ms, median) | size + fill (ms, median) |\n|---|---|---|---|---|\n");
    TimeChunkCells(layers, heads, rows, steps, false);
    TimeChunkCells(layers, heads, rows, steps, true);
    return 0;
  }
  using witcert::CellRecord;
  const int layers = argc > 1 ? std::atoi(argv[1]) : 32;
  const int heads = argc > 2 ? std::atoi(argv[2]) : 32;
  const int requests = argc > 3 ? std::atoi(argv[3]) : 16;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 64;
  const double uncertified = argc > 5 ? std::atof(argv[5]) : 1.0;
  if (layers <= 0 || heads <= 0 || requests <= 0 || steps <= 0) {
    std::fprintf(stderr, "usage: bench_risk_records [layers] [heads] [requests] [steps] [uncertified]\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<CellRecord>> cells(requests, std::vector<CellRecord>(static_cast<size_t>(layers) * heads));
  for (auto& step_cells : cells) {
    for (int l = 0; l < layers; ++l) {
      for (int h = 0; h < heads; ++h) {
        CellRecord& c = step_cells[static_cast<size_t>(l) * heads + h];
        c.layer = l;
        c.head = h;
        c.certified = u(rng) >= uncertified;
        c.tv_before = c.tv_after = c.certified ? 0.01f : 0.3f;
      }
    }
  }
  std::vector<witcert::RiskAccumulator> risk(requests);
  witcert::RiskCounters counters(layers, heads);
  std::vector<double> ms;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < requests; ++r) {
      for (CellRecord& c : cells[r]) {
        c.step = s;
        risk[r].Add(c, 0.0, 0.05f);
      }
      counters.AddAll(cells[r], 0.05f);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("%d layers x %d heads, %d requests, %.0f%% uncertified: %.3f ms per step (median of %d); "
              "uncertified heads per request %zu\n",
              layers, heads, requests, 100 * uncertified, Median(ms), steps,
              risk[0].Summary().uncertified_heads.size());
  return 0;
}
