// Decode ms/step of the CUDA backend on a synthetic model at a long context, batch 1 and 16:
// int8-rtn KV with the meter in observe mode, int8-rtn with the meter off, fp16 KV (meter
// off), int8-dither KV with the meter in observe mode. The context is filled with seeded pseudo-random K/V through the write-path kernel
// (CudaBackend::FillKvSynthetic) instead of a prefill: decode time does not depend on the KV
// values, and an 8k prefill per sequence is not what this measures.
//
// Usage: bench_decode_gpu [preset=llama-3.1-8b] [context=8192] [steps=20] [batches=1,16]
//                         [repair] [sample] [kivi2] [outliers]
// `repair` adds the gate's repair mode on int8-rtn (the context is then also written through to
// the pinned backing store, sized to hold it): τ = 1 (nothing flagged: the mode's fixed cost,
// one device check and sync per layer) and τ = the median TV bound of the observe run at that
// batch (about half the cells flagged every step: page-ins, re-runs). Repair rows also print
// page-ins per step and the certified share before and after the gate.
// `sample` gives every row a greedy SampleRequest, as the engine's scheduler does: the token is
// sampled on the device and the logits stay there. Without it the logits come back to the host.
// `kivi2` adds kivi2 KV (2-bit, keys encoded per full block; each sequence's unfilled block is
// staged exact, engine/backend/cuda/cuda_staged_blocks.cc) with the meter observing and off.
// `outliers` adds int8-rtn with 4 outlier channels per (layer, KV head, side) kept exact (chosen
// from the first filled block; decode through the first kernel's bypass variant, always metered).
// Each Forward() includes the host packing, the logits (or token) copy back and a stream sync,
// i.e. what the engine pays per step. Prints one markdown row per (scheme, meter, batch, CUDA
// graphs off / on): every step's kernels launched from the host, then the step replayed as a
// graph; "GPU ms" is the stream time of the step's GPU work (CudaBackend::last_step_gpu_ms), so
// the difference to ms/step is host work.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/synthetic_model.h"

namespace witcert {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

int Run(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "llama-3.1-8b";
  const int64_t context = argc > 2 ? std::atoll(argv[2]) : 8192;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 20;
  std::vector<int> batches = {1, 16};
  if (argc > 4) {
    batches.clear();
    for (absl::string_view b : absl::StrSplit(argv[4], ',')) {
      int v = 0;
      if (absl::SimpleAtoi(b, &v) && v > 0) batches.push_back(v);
    }
  }
  if (!CudaBackend::DeviceAvailable()) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  auto t0 = Clock::now();
  auto model = SyntheticModelLoader::Create(preset, 1, {}, 0);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const ModelConfig& c = (*model)->config();
  std::printf("model synthetic:%s: host weights built in %.1f s\n", preset.c_str(), Seconds(t0));
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int warmup = 3;
  const int64_t per_seq_tokens = context + warmup + steps + 1;
  bool with_repair = false, device_sampling = false, with_kivi2 = false, with_outliers = false;
  for (int i = 5; i < argc; ++i) {
    with_repair = with_repair || std::string(argv[i]) == "repair";
    device_sampling = device_sampling || std::string(argv[i]) == "sample";
    with_kivi2 = with_kivi2 || std::string(argv[i]) == "kivi2";
    with_outliers = with_outliers || std::string(argv[i]) == "outliers";
  }
  SampleRequest greedy;  // temperature 0
  greedy.temperature = 0.0f;

  struct Config {
    const char* scheme;
    bool meter;
    int repair = 0;  // 1: τ = 1, 2: τ = the observe run's median TV bound
    int32_t outliers = 0;  // outlier channels kept exact
  };
  std::vector<Config> configs = {{"int8-rtn", true}};
  if (with_repair) {
    configs.push_back({"int8-rtn", true, 1});
    configs.push_back({"int8-rtn", true, 2});
  }
  configs.push_back({"int8-rtn", false});
  configs.push_back({"fp16", false});
  configs.push_back({"int8-dither", true});  // Tier B keys, observe
  if (with_kivi2) {
    configs.push_back({"kivi2", true});
    configs.push_back({"kivi2", false});
  }
  if (with_outliers) {
    configs.push_back({"int8-rtn", true, 0, 4});
    configs.push_back({"int8-rtn", false, 0, 4});
  }
  std::vector<float> median_tv(max_batch + 1, 0.05f);  // by batch, from the observe run
  std::printf("\n| model | KV | meter | batch | context | CUDA graphs | ms/step | tokens/s | GPU ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::string last_scheme;
  std::unique_ptr<CudaBackend> backend;
  for (const Config& cfg : configs) {
    const std::string label =
        cfg.outliers > 0 ? absl::StrCat(cfg.scheme, " +", cfg.outliers, " outlier ch") : std::string(cfg.scheme);
    if (label != last_scheme) {
      backend.reset();
      KvCacheOptions o = KvCacheOptionsFor(c);
      o.block_size = 16;
      o.num_blocks = max_batch * ((per_seq_tokens + 15) / 16) + 16;
      o.k_scheme = o.v_scheme = cfg.scheme;
      o.outlier_channels = cfg.outliers;
      const bool write_through = with_repair && std::string(cfg.scheme) == "int8-rtn";
      o.backing_store_bytes = write_through ? o.num_blocks * int64_t{16} * c.num_layers * 2 *
                                                  c.kv_dim() * 4
                                            : 0;
      o.exact_cache_blocks = 8192;
      auto t1 = Clock::now();
      auto b = CudaBackend::Create(**model, o);
      if (b.status().code() == absl::StatusCode::kResourceExhausted) {  // e.g. fp16 at 16 × 32k on 80 GB
        std::printf("| synthetic:%s | %s | %s | %d | %lld | — | does not fit: %s | | |\n", preset.c_str(), label.c_str(),
                    cfg.meter ? "observe" : "off", max_batch, static_cast<long long>(context),
                    b.status().ToString().c_str());
        last_scheme.clear();
        continue;
      }
      if (!b.ok()) {
        std::fprintf(stderr, "%s\n", b.status().ToString().c_str());
        return 1;
      }
      backend = std::move(*b);
      std::fprintf(stderr, "[%s] weights uploaded (%.2f GiB) in %.1f s\n", cfg.scheme,
                   backend->weight_bytes() / double(1 << 30), Seconds(t1));
      t1 = Clock::now();
      for (int s = 0; s < max_batch; ++s) {
        if (!backend->kv_cache().AddSequence(s).ok() ||
            !backend->kv_cache().Reserve(s, per_seq_tokens).ok()) {
          std::fprintf(stderr, "KV reservation failed\n");
          return 1;
        }
        absl::Status st = backend->FillKvSynthetic(s, context, 7 + s, write_through);
        if (!st.ok()) {
          std::fprintf(stderr, "%s\n", st.ToString().c_str());
          return 1;
        }
      }
      std::fprintf(stderr, "[%s] KV filled (%d x %lld tokens) in %.1f s\n", cfg.scheme, max_batch,
                   static_cast<long long>(context), Seconds(t1));
      last_scheme = label;
    }
    for (int batch : batches) {
      GatePolicy policy;
      policy.mode = cfg.repair > 0 ? GateMode::kRepair : GateMode::kObserve;
      policy.tv_threshold = cfg.repair == 1 ? 1.0f : (cfg.repair == 2 ? median_tv[batch] : 0.05f);
      for (bool graphs : {false, true}) {  // side by side: every kernel launched, then replayed
        if (cfg.repair > 0 && graphs) continue;  // repair steps never replay (per-layer syncs)
        backend->set_cuda_graphs(graphs);
        std::vector<TokenId> tokens(batch);
        std::vector<double> times, gpu_ms;
        std::vector<float> tvs;
        int64_t cells = 0, cert_before = 0, cert_after = 0;
        const CudaBackend::RepairStats rs0 = backend->repair_stats();
        for (int step = 0; step < warmup + steps; ++step) {
          std::vector<ForwardItem> items(batch);
          for (int s = 0; s < batch; ++s) {
            tokens[s] = (s * 7919 + step * 104729) % c.vocab_size;
            // Every config starts from the same filled context: positions are rewritten.
            items[s] = ForwardItem{.seq = s,
                                   .tokens = absl::MakeSpan(&tokens[s], 1),
                                   .start_pos = context + step,
                                   .decode_step = step,
                                   .policy = cfg.meter ? &policy : nullptr,
                                   .sample = device_sampling ? &greedy : nullptr};
          }
          ForwardResult r;
          auto ts = Clock::now();
          absl::Status st = backend->Forward(items, &r);
          const double dt = Seconds(ts);
          if (!st.ok()) {
            std::fprintf(stderr, "%s\n", st.ToString().c_str());
            return 1;
          }
          if (step >= warmup) {
            times.push_back(dt);
            gpu_ms.push_back(backend->last_step_gpu_ms());
            for (const auto& item_cells : r.cells) {
              for (const CellRecord& cell : item_cells) {
                ++cells;
                cert_before += cell.tv_before <= policy.tv_threshold;
                cert_after += cell.certified;
                if (cfg.repair == 0) tvs.push_back(cell.tv_after);
              }
            }
          }
        }
        if (cfg.meter && cfg.repair == 0 && !tvs.empty()) {
          std::nth_element(tvs.begin(), tvs.begin() + tvs.size() / 2, tvs.end());
          median_tv[batch] = tvs[tvs.size() / 2];
        }
        std::sort(times.begin(), times.end());
        std::sort(gpu_ms.begin(), gpu_ms.end());
        const double ms = 1e3 * times[times.size() / 2];
        char mode[64];
        std::snprintf(mode, sizeof(mode), "%s", cfg.meter ? "observe" : "off");
        if (cfg.repair > 0) std::snprintf(mode, sizeof(mode), "repair τ=%.4g", policy.tv_threshold);
        std::printf("| synthetic:%s | %s | %s | %d | %lld | %s | %.2f | %.0f | %.2f |\n", preset.c_str(),
                    label.c_str(), mode, batch,
                    static_cast<long long>(context),
                    graphs ? (backend->graph_failures() > 0 ? "failed" : "on") : "off", ms,
                    batch * 1e3 / ms, gpu_ms[gpu_ms.size() / 2]);
        if (cfg.meter && cells > 0) {
          const CudaBackend::RepairStats rs = backend->repair_stats();
          const int n = warmup + steps;  // the phase times cover every step
          std::printf("|   ↳ cells %lld: certified %.1f%% before the gate, %.1f%% after; "
                      "%.1f page-ins and %.1f rounds/step; ms/step in check %.2f, rank %.2f, "
                      "page-in + re-run %.2f |  |  |  |  |  |  |  |  |\n",
                      static_cast<long long>(cells), 100.0 * cert_before / cells,
                      100.0 * cert_after / cells, double(rs.pageins - rs0.pageins) / n,
                      double(rs.rounds - rs0.rounds) / n, 1e3 * (rs.check_s - rs0.check_s) / n,
                      1e3 * (rs.rank_s - rs0.rank_s) / n, 1e3 * (rs.rerun_s - rs0.rerun_s) / n);
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace witcert

int main(int argc, char** argv) { return witcert::Run(argc, argv); }
