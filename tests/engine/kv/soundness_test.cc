// Soundness, property-based: for every registered scheme, through the real write path
// (KvCache::Write → GatherHead → MeteredAttention), the long double true TV and output error
// between exact and stored K/V never exceed the reported bounds (Tier A: zero violations).
// Tier B (int8-dither): on non-adaptive random queries the violation rate stays ≤ δ.
// WITCERT_LONG_TESTS=1 adds S = 131072 through the cache and 10^6 Tier B cells.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "engine/kv/kv_cache.h"
#include "gtest/gtest.h"
#include "kernels/cpu/metered_attention.h"
#include "tests/kernels/meter/long_double_reference.h"

namespace witcert {
namespace {

bool LongTests() { return std::getenv("WITCERT_LONG_TESTS") != nullptr; }

enum class Pattern { kNormal, kOutliers, kHuge, kNearSaturated, kOverflow };

float Sample(std::mt19937& rng, Pattern p, int channel) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  switch (p) {
    case Pattern::kNormal: return g(rng);
    case Pattern::kOutliers: return g(rng) * ((channel % 29 == 3) ? 100.0f : 1.0f);
    case Pattern::kHuge: return g(rng) * 2000.0f;
    case Pattern::kNearSaturated: {  // every value within a hair of ±absmax
      float s = (rng() & 1) ? 1.0f : -1.0f;
      return s * (1.0f - 1e-4f * std::fabs(g(rng)));
    }
    case Pattern::kOverflow: return g(rng) * 600.0f;  // past fp8's ±448
  }
  return 0.0f;
}

struct SweepRun {
  int64_t cells = 0;
  int64_t violations = 0;
  double max_ratio = 0;  // true TV / bound
};

// Writes S tokens with `pattern`, then checks `queries` queries per KV head.
void CheckScheme(const std::string& scheme, Pattern pattern, int64_t s, int queries,
                 uint64_t seed, SweepRun* run, RopePairing pairing = RopePairing::kInterleaved) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 2;
  o.head_dim = 64;
  o.rope_pairing = pairing;
  o.num_blocks = (s + 15) / 16 + 1;
  o.k_scheme = scheme;
  o.v_scheme = scheme;
  o.dither_seed = seed;
  o.backing_store_bytes = int64_t{1} << 33;
  auto cache_or = KvCache::Create(o);
  ASSERT_TRUE(cache_or.ok()) << cache_or.status();
  KvCache& cache = **cache_or;
  ASSERT_TRUE(cache.AddSequence(1).ok());
  ASSERT_TRUE(cache.Reserve(1, s).ok());
  std::mt19937 rng(seed);
  const int d = o.head_dim;
  std::vector<float> k(2 * d), v(2 * d);  // [Hkv, d]
  for (int64_t t = 0; t < s; ++t) {
    for (int j = 0; j < 2 * d; ++j) {
      k[j] = Sample(rng, pattern, j % d);
      v[j] = Sample(rng, pattern == Pattern::kOverflow ? Pattern::kNormal : pattern, j % d);
    }
    ASSERT_TRUE(cache.Write(1, 0, t, k.data(), v.data()).ok());
  }
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int h = 0; h < 2; ++h) {
    GatheredHead head;
    ASSERT_TRUE(cache.GatherHead(1, 0, h, s, &head).ok());
    std::vector<float> ek(s * d), ev(s * d);  // [S, d]
    ASSERT_TRUE(cache.GatherExactHead(1, 0, h, s, ek.data(), ev.data()).ok());
    const MeteredHeadInputs in = MeteredInputs(o, head);
    std::vector<float> q(d), out(d);
    for (int qi = 0; qi < queries; ++qi) {
      // Alternate random queries and adversarial ones aligned with a token's key residual.
      if (qi % 2 == 0) {
        for (auto& x : q) x = g(rng) * (pattern == Pattern::kHuge ? 0.01f : 1.0f);
      } else {
        int64_t t = rng() % s;
        for (int j = 0; j < d; ++j) q[j] = 4.0f * (ek[t * d + j] - head.k[t * d + j]) + 0.1f * g(rng);
      }
      MeteredAttentionOptions opt;
      opt.num_splits = 1 + qi % 4;
      opt.delta_loc = 0.0;  // Tier A only here: zero violations allowed
      MeteredAttentionResult res;
      MeteredAttention(in, q.data(), opt, out.data(), &res);
      auto truth = testing::TrueAttentionError(q.data(), ek.data(), ev.data(), head.k.data(),
                                               head.v.data(), s, d);
      ++run->cells;
      if (truth.tv > res.bound.tv || truth.out_err > res.bound.v_bound) {
        ++run->violations;
        ADD_FAILURE() << scheme << " S=" << s << " tv " << static_cast<double>(truth.tv)
                      << " > " << res.bound.tv << " or err " << static_cast<double>(truth.out_err)
                      << " > " << res.bound.v_bound;
      }
      if (res.bound.tv > 0) {
        run->max_ratio = std::max(run->max_ratio, static_cast<double>(truth.tv / res.bound.tv));
      }
    }
  }
}

TEST(Soundness, EverySchemeEveryPatternTierA) {
  const Pattern patterns[] = {Pattern::kNormal, Pattern::kOutliers, Pattern::kHuge,
                              Pattern::kNearSaturated, Pattern::kOverflow};
  uint64_t seed = 100;
  for (const std::string& scheme : RegisteredKvCodecs()) {
    SweepRun run;
    for (Pattern p : patterns) {
      for (int64_t s : {1, 5, 16, 100, 700}) {
        CheckScheme(scheme, p, s, s > 100 ? 6 : 12, ++seed, &run);
      }
    }
    EXPECT_EQ(run.violations, 0) << scheme;
    // Not vacuous everywhere: some cells come within 10^3 of their bound.
    if (scheme != "fp32") {
      EXPECT_GT(run.max_ratio, 1e-3) << scheme;
    }
  }
}

TEST(Soundness, HalfSplitPairingModel) {
  SweepRun run;
  CheckScheme("int8-rtn", Pattern::kOutliers, 200, 10, 7, &run, RopePairing::kHalfSplit);
  EXPECT_EQ(run.violations, 0);
}

TEST(Soundness, LongContextThroughCache) {
  SweepRun run;
  CheckScheme("int8-rtn", Pattern::kOutliers, LongTests() ? 131072 : 16384, 2, 3, &run);
  EXPECT_EQ(run.violations, 0);
}

// One KV head's int8-dither context for the Tier B tests: exact rows k, v [S, d]; Store() runs
// them through the codec (seed = the cell, position = the row) into stored keys, key witnesses
// and dither scales, and with `store_values` stored values and their summaries (otherwise the
// values stay exact).
struct DitherHead {
  static constexpr int d = 64, nb = 8;
  const int s;
  const bool store_values;
  const KvCodec& codec = **FindKvCodec("int8-dither");
  std::vector<float> k, v, ks, vs, scale, kw, vrho, vbound;
  DitherHead(int s, bool store_values)
      : s(s), store_values(store_values), k(s * d), v(s * d), ks(s * d), vs(s * d), scale(s), kw(s * nb),
        vrho(s), vbound(s) {}
  void Store(int64_t cell) {
    const BandLayout layout{d, nb, RopePairing::kInterleaved};
    std::vector<uint8_t> buf(codec.BytesPerVector(d));
    for (int t = 0; t < s; ++t) {
      CodecContext ctx{static_cast<uint64_t>(cell), 0, 0, t, false};
      codec.Encode(&k[t * d], d, ctx, buf.data());
      codec.Decode(buf.data(), d, ctx, &ks[t * d]);
      scale[t] = codec.DitherScale(buf.data(), d);
      uint8_t w[2 + nb];
      ComputeKeyWitness(&k[t * d], &ks[t * d], layout, w);
      DecodeKeyWitness(w, nb, &kw[t * nb]);
      if (!store_values) continue;
      ctx.is_value = true;
      codec.Encode(&v[t * d], d, ctx, buf.data());
      codec.Decode(buf.data(), d, ctx, &vs[t * d]);
      uint8_t sum[4];
      ComputeValueSummary(&v[t * d], &vs[t * d], layout, sum);
      DecodeValueSummary(sum, &vrho[t], &vbound[t]);
    }
  }
  MeteredHeadInputs Inputs() const {
    MeteredHeadInputs in;
    in.head_dim = d;
    in.num_bands = nb;
    in.num_tokens = s;
    in.k = ks.data();
    in.v = store_values ? vs.data() : v.data();
    in.k_witness = kw.data();
    in.v_rho = store_values ? vrho.data() : nullptr;
    in.v_bound = store_values ? vbound.data() : nullptr;
    in.k_dither_scale = scale.data();
    return in;
  }
  testing::TrueError Truth(const float* q) const {
    return testing::TrueAttentionError(q, k.data(), v.data(), ks.data(), store_values ? vs.data() : v.data(), s, d);
  }
};

// Tier B (int8-dither, δ_loc = 0.05, non-adaptive Gaussian queries): a violation is a cell with
// a true TV above the bound; the per-cell failure probability is ≤ δ, so over N cells the
// count is ≤ Binomial(N, δ): we allow δN + 5·sqrt(δN). (Typically 0: u_t is a union bound.)
TEST(Soundness, TierBViolationRateWithinDelta) {
  const int64_t cells = LongTests() ? 1000000 : 30000;
  const double delta = 0.05;
  DitherHead head(4, /*store_values=*/false);
  std::mt19937 rng(77);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> q(head.d), out(head.d);
  int64_t violations = 0, tier_b_binding = 0;
  for (int64_t cell = 0; cell < cells; ++cell) {
    for (auto& x : head.k) x = g(rng) * 3.0f;
    head.Store(cell);
    for (auto& x : q) x = g(rng) * 2.0f;
    for (auto& x : head.v) x = g(rng);
    MeteredAttentionOptions opt;
    opt.delta_loc = delta;
    MeteredAttentionResult res, res_a;
    MeteredAttention(head.Inputs(), q.data(), opt, out.data(), &res);
    opt.delta_loc = 0.0;
    MeteredAttention(head.Inputs(), q.data(), opt, out.data(), &res_a);
    ASSERT_TRUE(res.tier_b);
    if (res.bound.tv < res_a.bound.tv) ++tier_b_binding;
    if (head.Truth(q.data()).tv > res.bound.tv) ++violations;
  }
  const double mean = delta * cells;
  EXPECT_LE(violations, mean + 5 * std::sqrt(mean));
  EXPECT_GT(tier_b_binding, cells / 2) << "Tier B should be the tighter bound for dither";
}

// Tier B's scale-only and split-max forms (MeteredAttentionOptions::tier_b_form): on the same
// kind of cells, with stored values and their summaries, a longer context and 1-4 splits, each
// form's violation rate stays within δ, and the forms are ordered: scale-only never below the
// per-token form (its ε̂ = u_t ≥ min(ε_t, u_t) for every token), split-max never below
// scale-only (its A − 1 ≥ any weighted mean of expm1(u_t), its value sum ≥ Σ p̂_t ρ_t). Also
// reports how much looser each is.
TEST(Soundness, TierBFormsViolationRateWithinDelta) {
  const int64_t cells = LongTests() ? 200000 : 6000;
  const double delta = 0.05;
  DitherHead head(96, /*store_values=*/true);
  const int d = head.d;
  std::mt19937 rng(78);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> q(d), out(d);
  int64_t violations[3] = {}, below[3] = {}, looser[3] = {};
  std::vector<double> looseness[3];  // TV bound / the per-token form's
  for (int64_t cell = 0; cell < cells; ++cell) {
    for (int t = 0; t < head.s; ++t) {
      // Per-token magnitudes vary (so the split's largest scale is not every token's).
      const float mag = 1.0f + 3.0f * std::fabs(g(rng));
      for (int j = 0; j < d; ++j) {
        head.k[t * d + j] = g(rng) * mag;
        head.v[t * d + j] = g(rng);
      }
    }
    head.Store(cell);
    for (auto& x : q) x = g(rng) * 0.5f;
    MeteredAttentionOptions opt;
    opt.delta_loc = delta;
    opt.split_tokens = cell % 4 == 0 ? 0 : 32 * (cell % 4);  // 1 split, or 32-, 64-, 96-token cuts
    MeteredAttentionResult res[3];
    for (int f = 0; f < 3; ++f) {
      opt.tier_b_form = meter::kTierBForms[f];
      MeteredAttention(head.Inputs(), q.data(), opt, out.data(), &res[f]);
      ASSERT_TRUE(res[f].tier_b);
    }
    const auto truth = head.Truth(q.data());
    for (int f = 0; f < 3; ++f) {
      const meter::CertBound& b = res[f].bound;
      if (f > 0) {  // never below the tighter form before it
        const meter::CertBound& prev = res[f - 1].bound;
        if (b.a_minus_1 < prev.a_minus_1 * (1.0f - 1e-5f) || b.v_resid_sum < prev.v_resid_sum * (1.0f - 1e-5f)) ++below[f];
      }
      if (res[0].bound.tv > 0) looseness[f].push_back(b.tv / res[0].bound.tv);
      if (b.tv > res[0].bound.tv * 1.01f) ++looser[f];
      if (truth.tv > b.tv || truth.out_err > b.v_bound) ++violations[f];
    }
  }
  const double mean = delta * cells;
  for (int f = 0; f < 3; ++f) {
    const char* name = meter::TierBFormName(meter::kTierBForms[f]);
    EXPECT_LE(violations[f], mean + 5 * std::sqrt(mean)) << name;
    EXPECT_EQ(below[f], 0) << name << " fell below the tighter form before it";
    if (f == 0) continue;
    ASSERT_FALSE(looseness[f].empty());
    std::vector<double>& l = looseness[f];
    std::nth_element(l.begin(), l.begin() + l.size() / 2, l.end());
    const double median = l[l.size() / 2];
    EXPECT_GE(median, 1.0) << name;
    std::printf("[ measured ] %s / per-token TV bound: median %.3f, max %.3f, %lld of %zu cells > 1.01; "
                "%lld violations\n",
                name, median, *std::max_element(l.begin(), l.end()), static_cast<long long>(looser[f]), l.size(),
                static_cast<long long>(violations[f]));
  }
}

}  // namespace
}  // namespace witcert
