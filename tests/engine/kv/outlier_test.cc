// Outlier channel bypass (KvCacheOptions::outlier_channels = m): channel choice from the
// first block, exact until chosen, zero residual on outlier channels, scales over the
// non-outlier channels only, soundness for every scheme, the bound shrinking on ×100
// outliers, byte accounting and the pool back to full.
#include <algorithm>
#include <cmath>
#include <random>

#include "engine/kv/kv_cache.h"
#include "gtest/gtest.h"
#include "tests/engine/kv/cache_probe.h"

namespace witcert {
namespace {

using testing::CellSweep;
using testing::IsOutlierChannel;
using testing::Pattern;

TEST(OutlierBypass, RejectsBadCounts) {
  for (int m : {-1, 64, 100}) {
    auto o = testing::ProbeOptions("int8-rtn", "int8-rtn", 64, m, 16);
    EXPECT_EQ(KvCache::Create(o).status().code(), absl::StatusCode::kInvalidArgument) << m;
  }
  EXPECT_TRUE(KvCache::Create(testing::ProbeOptions("int8-rtn", "fp32", 64, 63, 16)).ok());
}

TEST(OutlierBypass, ChoosesFromFirstBlockThenFixed) {
  // ×100 channels are 3, 32, 61 at d = 64. Before the first block fills, nothing is chosen
  // and tokens are exact; the 16th write chooses, and later data cannot move the choice.
  auto o = testing::ProbeOptions("int8-rtn", "fp8-e4m3", 64, 3, 48);
  auto cache = std::move(KvCache::Create(o)).value();
  ASSERT_TRUE(cache->AddSequence(1).ok());
  ASSERT_TRUE(cache->Reserve(1, 48).ok());
  std::mt19937 rng(1);
  const int d = 64;
  std::vector<float> k(2 * d), v(2 * d);
  for (int64_t t = 0; t < 48; ++t) {
    for (int j = 0; j < 2 * d; ++j) {
      // After the first block the loud channels move to 10, 20, 30.
      const int c = j % d;
      const bool loud = t < 16 ? IsOutlierChannel(c) : (c == 10 || c == 20 || c == 30);
      std::normal_distribution<float> g(0.0f, 1.0f);
      k[j] = g(rng) * (loud ? 100.0f : 1.0f);
      v[j] = g(rng) * (loud ? 100.0f : 1.0f);
    }
    ASSERT_TRUE(cache->Write(1, 0, t, k.data(), v.data()).ok());
    if (t == 14) {
      EXPECT_FALSE(cache->outliers().chosen(0));
      GatheredHead head;
      ASSERT_TRUE(cache->GatherHead(1, 0, 0, 15, &head).ok());
      for (int64_t s = 0; s < 15; ++s) EXPECT_EQ(head.token_exact[s], 1);
      for (float w : head.k_witness) EXPECT_EQ(w, 0.0f);
    }
  }
  ASSERT_TRUE(cache->outliers().chosen(0));
  for (int h = 0; h < 2; ++h) {
    for (bool is_value : {false, true}) {
      const int32_t* ch = cache->outliers().channels(0, h, is_value);
      EXPECT_EQ(std::vector<int32_t>(ch, ch + 3), (std::vector<int32_t>{3, 32, 61}));
    }
  }
  EXPECT_EQ(cache->stats().groups_encoded, 1);  // only block 0 was staged
  // Zero residual on the outlier channels of every encoded token; witnesses bound the rest.
  for (int h = 0; h < 2; ++h) {
    GatheredHead head;
    ASSERT_TRUE(cache->GatherHead(1, 0, h, 48, &head).ok());
    std::vector<float> ek(48 * d), ev(48 * d);
    ASSERT_TRUE(cache->GatherExactHead(1, 0, h, 48, ek.data(), ev.data()).ok());
    for (int64_t t = 0; t < 48; ++t) {
      EXPECT_EQ(head.token_exact[t], 0);
      for (int c : {3, 32, 61}) {
        ASSERT_EQ(head.k[t * d + c], ek[t * d + c]) << t << " " << c;
        ASSERT_EQ(head.v[t * d + c], ev[t * d + c]) << t << " " << c;
      }
    }
  }
}

// int8-rtn with bypass: the per-token scale comes from the non-outlier channels only, so
// every non-outlier error is ≤ half a step of THEIR absmax/127 (bf16 scale rounded up:
// ≤ 2^-8 relative, 1.01 covers it). Without bypass the step is set by the ×100 channels.
TEST(OutlierBypass, ScaleOverNonOutlierChannelsOnly) {
  const int d = 64;
  for (int m : {0, 3}) {
    auto o = testing::ProbeOptions("int8-rtn", "int8-rtn", d, m, 64);
    auto cache = testing::FilledCache(o, Pattern::kOutliers, 64, 2);
    ASSERT_NE(cache, nullptr);
    GatheredHead head;
    ASSERT_TRUE(cache->GatherHead(1, 0, 1, 64, &head).ok());
    std::vector<float> ek(64 * d), ev(64 * d);
    ASSERT_TRUE(cache->GatherExactHead(1, 0, 1, 64, ek.data(), ev.data()).ok());
    double worst_rel = 0;  // max error / (non-outlier absmax / 254)
    for (int64_t t = 0; t < 64; ++t) {
      float amax = 0;
      for (int c = 0; c < d; ++c) {
        if (!IsOutlierChannel(c)) amax = std::fmax(amax, std::fabs(ek[t * d + c]));
      }
      for (int c = 0; c < d; ++c) {
        if (IsOutlierChannel(c)) continue;
        worst_rel = std::max(worst_rel, std::fabs(ek[t * d + c] - head.k[t * d + c]) /
                                            (0.5 * amax / 127));
      }
    }
    if (m > 0) {
      EXPECT_LE(worst_rel, 1.01);
    } else {
      EXPECT_GT(worst_rel, 10.0);  // the outliers inflate the step ~100×
    }
  }
}

// Tier A soundness with bypass, every registered scheme as K and V, adversarial patterns:
// zero violations of the long double truth.
TEST(OutlierBypass, EverySchemeSoundZeroViolations) {
  const Pattern patterns[] = {Pattern::kOutliers, Pattern::kHuge, Pattern::kNearSaturated,
                              Pattern::kShifted};
  uint64_t seed = 900;
  for (const std::string& scheme : RegisteredKvCodecs()) {
    CellSweep sweep;
    for (Pattern p : patterns) {
      for (int64_t s : {7, 16, 90}) {
        auto o = testing::ProbeOptions(scheme, scheme, 64, 4, s);
        auto cache = testing::FilledCache(o, p, s, ++seed);
        ASSERT_NE(cache, nullptr);
        testing::SweepCells(*cache, s, 6, seed, &sweep);
      }
    }
    EXPECT_EQ(sweep.violations, 0) << scheme;
  }
}

// The point of the bypass: on ×100 outlier channels the same tokens and the same queries get
// a visibly smaller certificate. Expected shrink of the key witness mass (Σ_b w_b): ~100×
// for int8-rtn (its step was set by the outliers), ~6× for fp8-e4m3 (floating codes: only
// the outliers' own 2^-4 relative error goes away), ~10× for int4-rtn and kivi2. Required:
// half of that or less. The mean TV bound must shrink ≥ 10× (int8-rtn) and ≥ 5× (fp8-e4m3);
// 4- and 2-bit codes stay near-vacuous on the aligned adversarial queries, so for them only
// a strict decrease is required. Zero violations both ways.
TEST(OutlierBypass, ShrinksTheBoundOnOutlierChannels) {
  struct Expect { const char* scheme; double witness_shrink, tv_shrink; };
  const Expect expects[] = {
      {"int8-rtn", 20, 10}, {"fp8-e4m3", 3, 5}, {"int4-rtn", 5, 1}, {"kivi2", 5, 1}};
  for (const Expect& e : expects) {
    double tv[2], wit[2];
    for (int m : {0, 3}) {
      auto o = testing::ProbeOptions(e.scheme, e.scheme, 64, m, 160);
      auto cache = testing::FilledCache(o, Pattern::kOutliers, 160, 33);
      ASSERT_NE(cache, nullptr);
      CellSweep sweep;
      testing::SweepCells(*cache, 160, 16, 44, &sweep);
      EXPECT_EQ(sweep.violations, 0) << e.scheme << " m=" << m;
      tv[m > 0] = sweep.sum_tv_bound / sweep.cells;
      GatheredHead head;
      ASSERT_TRUE(cache->GatherHead(1, 0, 0, 160, &head).ok());
      double w = 0;
      for (float x : head.k_witness) w += x;
      wit[m > 0] = w / 160;
    }
    std::printf("%s: mean TV bound %.4g -> %.4g, mean key witness %.4g -> %.4g with m=3\n",
                e.scheme, tv[0], tv[1], wit[0], wit[1]);
    EXPECT_LT(wit[1] * e.witness_shrink, wit[0]) << e.scheme;
    EXPECT_LT(tv[1] * e.tv_shrink, tv[0]) << e.scheme;
  }
}

// Tier B (int8-dither) with bypass: the dither step now comes from the non-outlier channels
// and the outlier channels carry no residual at all, so the sub-Gaussian proxy s²/12 per
// channel still dominates. Non-adaptive random queries, a fresh dither seed per cache: the
// violation count stays ≤ δN + 5·sqrt(δN) (binomial slack), and Tier B is the binding bound
// in most cells (it is actually exercised).
TEST(OutlierBypass, TierBDitherStaysWithinDelta) {
  const double delta = 0.05;
  const int d = 64, s = 24, caches = 150, queries = 8;
  int64_t cells = 0, violations = 0, tier_b_binding = 0;
  std::mt19937 rng(71);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int c = 0; c < caches; ++c) {
    auto o = testing::ProbeOptions("int8-dither", "int8-rtn", d, 3, s);
    o.dither_seed = 1000 + c;
    auto cache = testing::FilledCache(o, Pattern::kOutliers, s, 5000 + c);
    ASSERT_NE(cache, nullptr);
    for (int h = 0; h < 2; ++h) {
      GatheredHead head;
      ASSERT_TRUE(cache->GatherHead(1, 0, h, s, &head).ok());
      std::vector<float> ek(s * d), ev(s * d), q(d), out(d);
      ASSERT_TRUE(cache->GatherExactHead(1, 0, h, s, ek.data(), ev.data()).ok());
      for (int qi = 0; qi < queries; ++qi) {
        for (auto& x : q) x = g(rng) * 0.2f;
        MeteredAttentionOptions opt;
        opt.delta_loc = delta;
        MeteredAttentionResult res, res_a;
        MeteredAttention(MeteredInputs(o, head), q.data(), opt, out.data(), &res);
        opt.delta_loc = 0.0;
        MeteredAttention(MeteredInputs(o, head), q.data(), opt, out.data(), &res_a);
        auto truth = testing::TrueAttentionError(q.data(), ek.data(), ev.data(), head.k.data(),
                                                 head.v.data(), s, d);
        ++cells;
        violations += truth.tv > res.bound.tv;
        tier_b_binding += res.bound.tv < res_a.bound.tv;
      }
    }
  }
  const double mean = delta * cells;
  EXPECT_LE(violations, mean + 5 * std::sqrt(mean));
  EXPECT_GT(tier_b_binding, cells / 2);
}

TEST(OutlierBypass, BytesAccountedAndPoolBackToFull) {
  const int m = 5, d = 64, nb = 8;
  auto o = testing::ProbeOptions("int8-rtn", "fp32", d, m, 64);
  o.num_layers = 2;
  auto cap = KvCache::CapacityFor(o);
  ASSERT_TRUE(cap.ok());
  // int8-rtn K: d codes + bf16 scale + m fp32 exact values + band witness (B codes + bf16
  // unit); fp32 V: exact, no outliers, no summary.
  EXPECT_EQ(cap->k_outlier_bytes, 4 * m);
  EXPECT_EQ(cap->v_outlier_bytes, 0);
  const int per_head = (d + 2 + 4 * m + nb + 2) + 4 * d;
  EXPECT_DOUBLE_EQ(cap->bytes_per_token_per_kv_head, per_head);
  EXPECT_EQ(cap->bytes_per_block, 2 * 2 * 16 * per_head);
  EXPECT_EQ(cap->fixed_bytes, 2 * 2 * 2 * (m + d) * 4);  // channel + fill tables
  EXPECT_EQ(cap->staging_bytes_per_block, 2 * 16 * 2 * d * 4);
  auto cache = std::move(KvCache::Create(o)).value();
  EXPECT_EQ(cache->BytesPerToken(), 2 * 2 * per_head);
  EXPECT_EQ(cache->KBytesPerHead(), d + 2 + 4 * m + nb + 2);
  // m = 0 leaves every existing layout untouched.
  auto plain = testing::ProbeOptions("int8-rtn", "fp32", d, 0, 64);
  plain.num_layers = 2;
  EXPECT_EQ(KvCache::CapacityFor(plain)->bytes_per_token_per_kv_head, d + 2 + nb + 2 + 4 * d);
  EXPECT_EQ(KvCache::CapacityFor(plain)->staging_bytes_per_block, 0);

  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(2 * d), v(2 * d);
  for (SeqId seq = 1; seq <= 3; ++seq) {  // partial blocks left staged at free time
    ASSERT_TRUE(cache->AddSequence(seq).ok());
    ASSERT_TRUE(cache->Reserve(seq, 10 * seq).ok());
    for (int64_t t = 0; t < 10 * seq; ++t) {
      for (auto& x : k) x = g(rng);
      for (auto& x : v) x = g(rng);
      for (int32_t l = 0; l < 2; ++l) ASSERT_TRUE(cache->Write(seq, l, t, k.data(), v.data()).ok());
    }
  }
  for (SeqId seq = 1; seq <= 3; ++seq) cache->FreeSequence(seq);
  EXPECT_EQ(cache->num_free_blocks(), cache->num_total_blocks());
}

}  // namespace
}  // namespace witcert
