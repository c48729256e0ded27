// The gate: policy tightening, repair to exact, zero budget, risk ranking, audit, records.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "engine/cert/audit.h"
#include "engine/cert/records.h"
#include "engine/gate/gate_policy.h"
#include "engine/gate/metered_decode.h"
#include "gtest/gtest.h"
#include "kernels/cpu/metered_attention.h"

namespace witcert {
namespace {

// A request's gate numbers, as both front ends check them: TV and δ in (0, 1], the value
// threshold in (0, 1e9]; 0, negatives, NaN and infinities are errors naming the field.
TEST(GatePolicy, CheckGateOverrideRanges) {
  for (const char* key : {"tv_threshold", "delta", "v_threshold"}) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(CheckGateOverride(key, key, 1e-6).ok());
    EXPECT_TRUE(CheckGateOverride(key, key, 1.0).ok());
    for (double bad : {0.0, -0.5, std::nan(""), double{INFINITY}}) {
      const absl::Status s = CheckGateOverride(key, "gate.x", bad);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(s.message().find("'gate.x'"), std::string_view::npos) << s;
    }
  }
  EXPECT_FALSE(CheckGateOverride("tv_threshold", "f", 1.5).ok());
  EXPECT_FALSE(CheckGateOverride("delta", "f", 1.5).ok());
  EXPECT_TRUE(CheckGateOverride("v_threshold", "f", 1.5).ok());
  EXPECT_FALSE(CheckGateOverride("v_threshold", "f", 2e9).ok());
}

TEST(GatePolicy, TightenTakesTheStricterField) {
  GatePolicy base;
  base.mode = GateMode::kObserve;
  base.tv_threshold = 0.1f;
  base.v_threshold = 0.0f;
  base.delta_req = 0.01;
  base.pagein_budget_per_step = 2;
  base.audit_rate = 0.01;
  GatePolicy req = base;
  req.mode = GateMode::kOff;  // a request cannot switch the meter off
  req.tv_threshold = 0.5f;    // nor loosen thresholds
  req.v_threshold = 0.2f;
  req.delta_req = 0.001;
  req.pagein_budget_per_step = 1;
  req.audit_rate = 0.5;
  GatePolicy t = Tighten(base, req);
  EXPECT_EQ(t.mode, GateMode::kObserve);
  EXPECT_EQ(t.tv_threshold, 0.1f);
  EXPECT_EQ(t.v_threshold, 0.2f);
  EXPECT_EQ(t.delta_req, 0.001);
  EXPECT_EQ(t.pagein_budget_per_step, 2);
  EXPECT_EQ(t.audit_rate, 0.5);
  req.mode = GateMode::kRepair;
  EXPECT_EQ(Tighten(base, req).mode, GateMode::kRepair);
  // Tier B's form: the tighter of the operator's and the request's (per-token < scale-only <
  // split-max); a request without a preference keeps the operator's.
  using meter::TierBForm;
  EXPECT_EQ(Tighten(base, LoosestGatePolicy()).tier_b_form, TierBForm::kPerToken);
  base.tier_b_form = TierBForm::kSplitMax;
  EXPECT_EQ(Tighten(base, LoosestGatePolicy()).tier_b_form, TierBForm::kSplitMax);
  req.tier_b_form = TierBForm::kScaleOnly;
  EXPECT_EQ(Tighten(base, req).tier_b_form, TierBForm::kScaleOnly);
  req.tier_b_form = TierBForm::kPerToken;
  EXPECT_EQ(Tighten(base, req).tier_b_form, TierBForm::kPerToken);
  base.tier_b_form = TierBForm::kScaleOnly;
  EXPECT_EQ(Tighten(base, LoosestGatePolicy()).tier_b_form, TierBForm::kScaleOnly);
  base.tier_b_form = TierBForm::kPerToken;
  for (TierBForm form : meter::kTierBForms) {
    const absl::StatusOr<TierBForm> parsed = ParseTierBForm(meter::TierBFormName(form));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, form);
  }
  EXPECT_FALSE(ParseTierBForm("split").ok());
  EXPECT_DOUBLE_EQ(LocalDelta(0.3, 30, 9, 100), 0.3 / 27000);
  PolicyHolder holder(base);
  auto before = holder.Get();
  holder.Set(t);
  EXPECT_EQ(before->tv_threshold, 0.1f);  // readers keep their snapshot
  EXPECT_EQ(holder.Get()->audit_rate, 0.5);
}

struct Fixture {
  std::unique_ptr<KvCache> cache;
  int64_t s = 64;                   // 4 blocks of 16
  int32_t hq = 4, d = 64;
  std::vector<float> q;             // [Hq, d]
};

// int8-rtn keys; block `hot` gets a ×`hot_factor` outlier channel (large residual).
Fixture Make(int hot, const std::string& scheme = "int8-rtn", float hot_factor = 300.0f) {
  Fixture f;
  KvCacheOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = f.d;
  o.num_blocks = 16;
  o.k_scheme = scheme;
  o.v_scheme = scheme;
  o.exact_cache_blocks = 64;
  f.cache = std::move(KvCache::Create(o)).value();
  EXPECT_TRUE(f.cache->AddSequence(3).ok());
  EXPECT_TRUE(f.cache->Reserve(3, f.s).ok());
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(2 * f.d), v(2 * f.d);
  for (int64_t t = 0; t < f.s; ++t) {
    for (int j = 0; j < 2 * f.d; ++j) {
      k[j] = g(rng);
      v[j] = g(rng);
    }
    if (t / 16 == hot) {
      k[7] *= hot_factor;  // absmax ×hot_factor → every other channel's error too
      k[f.d + 7] *= hot_factor;
    }
    for (int l = 0; l < 2; ++l) EXPECT_TRUE(f.cache->Write(3, l, t, k.data(), v.data()).ok());
  }
  f.q.resize(f.hq * f.d);
  for (auto& x : f.q) x = g(rng);
  return f;
}

std::vector<CellRecord> Decode(Fixture& f, const GatePolicy& p, std::vector<float>* out,
                               int64_t step = 0, RiskCounters* counters = nullptr) {
  out->assign(f.hq * f.d, 0.0f);
  std::vector<CellRecord> cells(f.hq);
  DecodeAttentionRequest r;
  r.seq = 3;
  r.layer = 1;
  r.step = step;
  r.context_len = f.s;
  r.q = f.q.data();
  r.out = out->data();
  r.cells = cells.data();
  r.policy = &p;
  r.num_splits = 2;
  EXPECT_TRUE(MeteredDecodeAttention(*f.cache, r, f.hq, counters).ok());
  return cells;
}

TEST(Gate, EveryBlockPromotedGivesZeroBoundAndExactOutput) {
  Fixture f = Make(-1);
  GatePolicy p;
  p.mode = GateMode::kRepair;
  p.tv_threshold = 0.0f;  // only a zero bound certifies
  p.pagein_budget_per_step = 1000;
  std::vector<float> out;
  auto cells = Decode(f, p, &out);
  for (const auto& c : cells) {
    // The second query head of a GQA group reads the rows its sibling already promoted.
    if (c.head % 2 == 0) {
      EXPECT_GT(c.tv_before, 0.0f);
    }
    EXPECT_EQ(c.tv_after, 0.0f);
    EXPECT_EQ(c.v_after, 0.0f);
    EXPECT_TRUE(c.certified);
  }
  EXPECT_EQ(cells[0].pageins + cells[2].pageins, 8);  // 4 blocks × 2 KV heads, once each
  // Reference: plain attention over the exact rows. Same fp32 ops in the same order: equal
  // up to the split merge's rounding (rtol 1e-6).
  for (int h = 0; h < f.hq; ++h) {
    std::vector<float> ek(f.s * f.d), ev(f.s * f.d), ref(f.d);
    ASSERT_TRUE(f.cache->GatherExactHead(3, 1, h / 2, f.s, ek.data(), ev.data()).ok());
    MeteredHeadInputs in;
    in.head_dim = f.d;
    in.num_tokens = f.s;
    in.k = ek.data();
    in.v = ev.data();
    MeteredAttentionResult res;
    MeteredAttention(in, &f.q[h * f.d], MeteredAttentionOptions{2, true, 0.0}, ref.data(), &res);
    EXPECT_EQ(res.bound.tv, 0.0f);
    for (int j = 0; j < f.d; ++j) EXPECT_NEAR(out[h * f.d + j], ref[j], 1e-6f * (1 + std::fabs(ref[j])));
  }
  // Promoted blocks stay exact for the next step: no page-ins needed, bound already 0.
  auto next = Decode(f, p, &out, 1);
  for (const auto& c : next) {
    EXPECT_EQ(c.tv_before, 0.0f);
    EXPECT_EQ(c.pageins, 0);
  }
}

TEST(Gate, ZeroBudgetChangesNothing) {
  Fixture f = Make(1);
  GatePolicy observe;
  observe.mode = GateMode::kObserve;
  observe.tv_threshold = 0.0f;
  std::vector<float> out_obs, out_rep;
  auto a = Decode(f, observe, &out_obs);
  GatePolicy repair = observe;
  repair.mode = GateMode::kRepair;
  repair.pagein_budget_per_step = 0;
  auto b = Decode(f, repair, &out_rep);
  EXPECT_EQ(out_obs, out_rep);
  for (int h = 0; h < f.hq; ++h) {
    EXPECT_EQ(a[h].tv_before, b[h].tv_after);
    EXPECT_EQ(b[h].pageins, 0);
    EXPECT_FALSE(b[h].certified);
  }
  EXPECT_EQ(f.cache->stats().promotions, 0);
}

TEST(Gate, RiskRankingPromotesTheBlockCarryingMostMass) {
  for (int hot : {0, 2, 3}) {
    Fixture f = Make(hot);
    GatePolicy p;
    p.mode = GateMode::kRepair;
    p.tv_threshold = 0.0f;
    p.pagein_budget_per_step = 1;
    std::vector<float> out;
    auto cells = Decode(f, p, &out);
    EXPECT_EQ(cells[0].pageins, 1);
    GatheredHead head;
    ASSERT_TRUE(f.cache->GatherHead(3, 1, 0, f.s, &head).ok());
    for (int64_t t = 0; t < f.s; ++t) {
      EXPECT_EQ(head.token_exact[t], t / 16 == hot ? 1 : 0) << "hot " << hot << " t " << t;
    }
    EXPECT_LT(cells[0].tv_after, cells[0].tv_before);
  }
}

// GatePolicy::tier_b_form reaches the CPU path: int8-dither Tier B cells in the scale-only and
// split-max forms are never below the tighter form's bound, serve the same output, and stay Tier B.
TEST(Gate, TierBFormsAreNeverTighter) {
  Fixture f = Make(1, "int8-dither", 10.0f);  // one block's scales ~4x the others'
  std::vector<float> out[3];
  std::vector<CellRecord> cells[3];
  for (int form = 0; form < 3; ++form) {
    GatePolicy p;
    p.tier_b_form = static_cast<meter::TierBForm>(form);
    out[form].assign(f.hq * f.d, 0.0f);
    cells[form].resize(f.hq);
    DecodeAttentionRequest r;
    r.seq = 3;
    r.layer = 1;
    r.context_len = f.s;
    r.q = f.q.data();
    r.out = out[form].data();
    r.cells = cells[form].data();
    r.policy = &p;
    r.delta_loc = 1e-6;
    r.num_splits = 2;
    ASSERT_TRUE(MeteredDecodeAttention(*f.cache, r, f.hq).ok());
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
  int looser = 0;
  for (int h = 0; h < f.hq; ++h) {
    for (int form = 1; form < 3; ++form) {
      EXPECT_EQ(cells[form][h].tier, 'B');
      EXPECT_GE(cells[form][h].tv_before, cells[form - 1][h].tv_before * (1.0f - 1e-5f)) << "head " << h;
    }
    looser += cells[2][h].tv_before > cells[1][h].tv_before * 1.001f;
  }
  EXPECT_GT(looser, 0) << "the block with the outlier should make the split-max form looser than scale-only";
}

TEST(Gate, OffModeComputesAttentionWithoutCells) {
  Fixture f = Make(-1);
  GatePolicy off;
  off.mode = GateMode::kOff;
  std::vector<float> out_off, out_obs;
  auto cells = Decode(f, off, &out_off);
  GatePolicy obs;
  Decode(f, obs, &out_obs);
  EXPECT_EQ(out_off, out_obs);  // the meter never changes the served output
  EXPECT_EQ(cells[0].tv_before, 0.0f);  // untouched default record
}

TEST(Audit, TierAHasNoViolationsAndCountersAggregate) {
  for (const char* scheme : {"int8-rtn", "int4-rtn", "fp8-e4m3", "int8-dither"}) {
    Fixture f = Make(2, scheme);
    GatePolicy p;
    p.mode = GateMode::kObserve;
    p.audit_rate = 1.0;
    RiskCounters counters(2, f.hq);
    RiskAccumulator acc;
    std::vector<float> out;
    for (int step = 0; step < 5; ++step) {
      auto cells = Decode(f, p, &out, step, &counters);
      for (const auto& c : cells) {
        EXPECT_TRUE(c.audited);
        EXPECT_FALSE(c.violation) << scheme << " true " << c.true_tv << " bound " << c.tv_after;
        EXPECT_LE(c.true_tv, c.tv_after);
        acc.Add(c, 0.0, p.tv_threshold);
      }
    }
    auto tot = counters.Total();
    EXPECT_EQ(tot.cells, 5 * f.hq);
    EXPECT_EQ(tot.audited, 5 * f.hq);
    EXPECT_EQ(tot.violations_tier_a + tot.violations_tier_b, 0);
    EXPECT_EQ(counters.Get(1, 0).cells, 5);
    auto sum = acc.Summary();
    EXPECT_EQ(sum.cells, 5 * f.hq);
    EXPECT_GE(sum.max_tv_before, sum.mean_tv_before);
  }
  EXPECT_FALSE(AuditSampled(1, 2, 3, 0.0));
  int hits = 0;
  for (int step = 0; step < 10000; ++step) hits += AuditSampled(4, 1, step, 0.1) ? 1 : 0;
  EXPECT_NEAR(hits, 1000, 150);  // Binomial(10^4, 0.1): σ = 30
  EXPECT_EQ(AuditSampled(4, 1, 77, 0.1), AuditSampled(4, 1, 77, 0.1));
}

TEST(Records, SummaryAndTrace) {
  RiskAccumulator acc;
  CellRecord a{0, 1, 0, 0.2f, 0.01f, 0, 0, 2, true, 'A'};
  CellRecord b{3, 2, 0, 0.01f, 0.01f, 0, 0, 0, true, 'B'};
  CellRecord c{3, 2, 1, 0.5f, 0.4f, 0, 0, 4, false, 'A'};
  acc.Add(a, 1e-6, 0.05f);
  acc.Add(b, 1e-6, 0.05f);
  acc.Add(c, 1e-6, 0.05f);
  acc.Add(c, 1e-6, 0.05f);
  RiskSummary s = acc.Summary();
  EXPECT_EQ(s.cells, 4);
  EXPECT_DOUBLE_EQ(s.coverage, 0.25);
  EXPECT_EQ(s.pageins, 10);
  EXPECT_EQ(s.uncertified_cells, 2);
  ASSERT_EQ(s.uncertified_heads.size(), 1u);
  EXPECT_EQ(s.uncertified_heads[0], std::make_pair(3, 2));
  EXPECT_NEAR(s.delta_spent, 1e-6, 1e-12);
  EXPECT_NEAR(s.max_tv_before, 0.5, 1e-6);
  std::string path = ::testing::TempDir() + "/witcert_trace.jsonl";
  std::remove(path.c_str());
  std::unique_ptr<TraceWriter> w;
  ASSERT_TRUE(TraceWriter::Open(path, &w).ok());
  w->Write(9, a);
  w->Write(9, c);
  w.reset();
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_NE(line.find("\"request\":9"), std::string::npos);
  }
  EXPECT_EQ(lines, 2);
}

}  // namespace
}  // namespace witcert
