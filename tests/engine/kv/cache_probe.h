// Test helpers shared by the kivi2 and outlier-bypass tests: build a small cache, write
// adversarial tokens through KvCache::Write, and check every cell's certificate against the
// long double truth (exact rows from the backing store vs the rows attention really read).
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "gtest/gtest.h"
#include "kernels/cpu/metered_attention.h"
#include "tests/kernels/meter/long_double_reference.h"

namespace witcert::testing {

enum class Pattern { kNormal, kOutliers, kHuge, kNearSaturated, kShifted };

// Channels c % 29 == 3 (3, 32, 61, 90, 119 ...) carry ×100 outliers in kOutliers.
inline bool IsOutlierChannel(int c) { return c % 29 == 3; }

inline float Sample(std::mt19937& rng, Pattern p, int channel) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  switch (p) {
    case Pattern::kNormal: return g(rng);
    case Pattern::kOutliers: return g(rng) * (IsOutlierChannel(channel) ? 100.0f : 1.0f);
    case Pattern::kHuge: return g(rng) * 2000.0f;
    case Pattern::kNearSaturated: {
      float s = (rng() & 1) ? 1.0f : -1.0f;
      return s * (1.0f - 1e-4f * std::fabs(g(rng)));
    }
    case Pattern::kShifted: return 50.0f + 0.5f * channel + g(rng);  // per-channel offsets
  }
  return 0.0f;
}

inline KvCacheOptions ProbeOptions(const std::string& k_scheme, const std::string& v_scheme,
                                   int32_t head_dim, int32_t outliers, int64_t tokens) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 2;
  o.head_dim = head_dim;
  o.block_size = 16;
  o.num_blocks = (tokens + 15) / 16 + 1;
  o.k_scheme = k_scheme;
  o.v_scheme = v_scheme;
  o.outlier_channels = outliers;
  o.dither_seed = 11;
  o.backing_store_bytes = int64_t{1} << 30;
  return o;
}

// Writes `tokens` tokens (seq 1, layer 0) drawn from `pattern` with a fixed seed; returns
// the cache. The same seed gives the same tokens whatever the options.
inline std::unique_ptr<KvCache> FilledCache(const KvCacheOptions& o, Pattern pattern,
                                            int64_t tokens, uint64_t seed) {
  auto cache = KvCache::Create(o);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return nullptr;
  EXPECT_TRUE((*cache)->AddSequence(1).ok());
  EXPECT_TRUE((*cache)->Reserve(1, tokens).ok());
  std::mt19937 rng(seed);
  const int d = o.head_dim;
  std::vector<float> k(o.num_kv_heads * d), v(o.num_kv_heads * d);  // [Hkv, d]
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < o.num_kv_heads * d; ++j) {
      k[j] = Sample(rng, pattern, j % d);
      v[j] = Sample(rng, pattern, j % d);
    }
    EXPECT_TRUE((*cache)->Write(1, 0, t, k.data(), v.data()).ok());
  }
  return std::move(cache).value();
}

struct CellSweep {
  int64_t cells = 0;
  int64_t violations = 0;
  double sum_tv_bound = 0;  // Σ reported TV bounds
  double max_ratio = 0;     // max true TV / bound
};

// `queries` queries per KV head (seeded: the same queries for the same seed), alternating
// random and adversarial (aligned with one token's key residual). Tier A only (δ_loc = 0).
inline void SweepCells(KvCache& cache, int64_t tokens, int queries, uint64_t seed,
                       CellSweep* out) {
  const KvCacheOptions& o = cache.options();
  const int d = o.head_dim;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int h = 0; h < o.num_kv_heads; ++h) {
    GatheredHead head;
    ASSERT_TRUE(cache.GatherHead(1, 0, h, tokens, &head).ok());
    std::vector<float> ek(tokens * d), ev(tokens * d);  // [S, d]
    ASSERT_TRUE(cache.GatherExactHead(1, 0, h, tokens, ek.data(), ev.data()).ok());
    std::vector<float> q(d), res_out(d);
    for (int qi = 0; qi < queries; ++qi) {
      if (qi % 2 == 0) {
        for (auto& x : q) x = g(rng);
      } else {
        const int64_t t = rng() % tokens;
        for (int j = 0; j < d; ++j) q[j] = 4.0f * (ek[t * d + j] - head.k[t * d + j]) + 0.1f * g(rng);
      }
      MeteredAttentionOptions opt;
      opt.num_splits = 1 + qi % 3;
      MeteredAttentionResult res;
      MeteredAttention(MeteredInputs(o, head), q.data(), opt, res_out.data(), &res);
      auto truth = TrueAttentionError(q.data(), ek.data(), ev.data(), head.k.data(),
                                      head.v.data(), tokens, d);
      ++out->cells;
      out->sum_tv_bound += res.bound.tv;
      if (truth.tv > res.bound.tv || truth.out_err > res.bound.v_bound) {
        ++out->violations;
        ADD_FAILURE() << o.k_scheme << "/" << o.v_scheme << " m=" << o.outlier_channels
                      << " S=" << tokens << " tv " << static_cast<double>(truth.tv) << " > "
                      << res.bound.tv << " or err " << static_cast<double>(truth.out_err)
                      << " > " << res.bound.v_bound;
      }
      if (res.bound.tv > 0) {
        out->max_ratio = std::max(out->max_ratio, static_cast<double>(truth.tv / res.bound.tv));
      }
    }
  }
}

}  // namespace witcert::testing
