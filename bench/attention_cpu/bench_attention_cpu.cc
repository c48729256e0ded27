// Batched decode attention on the CPU, alone: N sequences of S cached tokens, one layer, the
// default model's attention shape (9 query / 3 KV heads, d = 64), every sequence's
// MeteredDecodeAttention call spread over the thread pool as CpuBackend does for a batch.
// Reports ns per (token, query head) with the meter off and in observe mode, side by side.
//
//   bench_attention_cpu [SEQS=16] [CONTEXT=128] [THREADS=2] [SCHEME=fp16] [REPS=200] [GATE=both]
// GATE: off, observe or both (one mode alone is for profiling).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/gate/gate_policy.h"
#include "engine/gate/metered_decode.h"
#include "engine/kv/kv_cache.h"
#include "kernels/cpu/parallel.h"

namespace {

constexpr int kLayers = 30, kHq = 9, kHkv = 3, kD = 64;

int Run(int seqs, int ctx, int threads, const std::string& scheme, int reps,
        const std::string& gate) {
  witcert::KvCacheOptions o;
  o.num_layers = kLayers;
  o.num_kv_heads = kHkv;
  o.head_dim = kD;
  o.rope_pairing = witcert::RopePairing::kHalfSplit;
  o.k_scheme = o.v_scheme = scheme;
  o.num_blocks = static_cast<int64_t>(seqs) * ((ctx + 15) / 16 + 1);
  auto cache_or = witcert::KvCache::Create(o);
  if (!cache_or.ok()) {
    std::fprintf(stderr, "%s\n", cache_or.status().ToString().c_str());
    return 1;
  }
  witcert::KvCache& kv = **cache_or;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(kHkv * kD), v(kHkv * kD);
  for (int s = 0; s < seqs; ++s) {
    if (!kv.AddSequence(s).ok() || !kv.Reserve(s, ctx).ok()) return 1;
    for (int l = 0; l < kLayers; ++l) {
      for (int t = 0; t < ctx; ++t) {
        for (float& x : k) x = 2.0f * nd(rng);
        for (float& x : v) x = nd(rng);
        if (!kv.Write(s, l, t, k.data(), v.data()).ok()) return 1;
      }
    }
  }
  std::vector<float> q(static_cast<size_t>(seqs) * kHq * kD), out(q.size());
  for (float& x : q) x = 0.5f * nd(rng);
  witcert::ThreadPool pool(threads);
  std::printf(
      "| gate | seqs | context | ns per (token, query head) | µs per (sequence, layer) |\n");
  std::printf("|---|---|---|---|---|\n");
  for (witcert::GateMode mode : {witcert::GateMode::kOff, witcert::GateMode::kObserve}) {
    if (gate != "both" && gate != witcert::GateModeName(mode)) continue;
    witcert::GatePolicy policy;
    policy.mode = mode;
    std::vector<witcert::CellRecord> cells(static_cast<size_t>(seqs) * kHq);
    auto step = [&](int layer) {
      pool.ParallelFor(seqs, 1, [&](int64_t b, int64_t e) {
        for (int64_t s = b; s < e; ++s) {
          witcert::DecodeAttentionRequest r;
          r.seq = s;
          r.layer = layer;
          r.context_len = ctx;
          r.q = &q[s * kHq * kD];
          r.out = &out[s * kHq * kD];
          r.cells = &cells[s * kHq];
          r.policy = mode == witcert::GateMode::kOff ? nullptr : &policy;
          if (!witcert::MeteredDecodeAttention(kv, r, kHq).ok()) std::abort();
        }
      });
    };
    for (int i = 0; i < 10; ++i) step(i % kLayers);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) step(i % kLayers);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double ns = sec * 1e9 / (static_cast<double>(reps) * seqs * ctx * kHq);
    std::printf("| %s | %d | %d | %.2f | %.2f |\n", witcert::GateModeName(mode), seqs, ctx, ns,
                sec * 1e6 / (static_cast<double>(reps) * seqs));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int seqs = argc > 1 ? std::atoi(argv[1]) : 16;
  const int ctx = argc > 2 ? std::atoi(argv[2]) : 128;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::string scheme = argc > 4 ? argv[4] : "fp16";
  const int reps = argc > 5 ? std::atoi(argv[5]) : 200;
  const std::string gate = argc > 6 ? argv[6] : "both";
  if (seqs < 1 || ctx < 1 || threads < 1 || reps < 1 ||
      (gate != "both" && gate != "off" && gate != "observe")) {
    std::fprintf(stderr,
                 "usage: %s [SEQS] [CONTEXT] [THREADS] [SCHEME] [REPS] [off|observe|both]\n",
                 argv[0]);
    return 2;
  }
  return Run(seqs, ctx, threads, scheme, reps, gate);
}
