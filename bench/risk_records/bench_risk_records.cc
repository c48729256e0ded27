// Host cost of the meter's records per decode step, as the engine's loop pays it
// (engine/runtime/engine.cc): every cell of every running request into its RiskAccumulator,
// then the step's cells into the per-(layer, head) RiskCounters for Prometheus.
//
// Usage: bench_risk_records [layers=32] [heads=32] [requests=16] [steps=64] [uncertified=1.0]
// The shape defaults to an 8B model's (32 layers × 32 query heads) at batch 16; `uncertified`
// is the share of cells the gate leaves uncertified (a 2-bit store at the default threshold:
// all of them). Prints the median ms per step over `steps` steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/cert/records.h"

int main(int argc, char** argv) {
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
  std::sort(ms.begin(), ms.end());
  std::printf("%d layers x %d heads, %d requests, %.0f%% uncertified: %.3f ms per step (median of %d); "
              "uncertified heads per request %zu\n",
              layers, heads, requests, 100 * uncertified, ms[ms.size() / 2], steps,
              risk[0].Summary().uncertified_heads.size());
  return 0;
}
