// The metered attention kernel on plain arrays: soundness of its fp32 bound against a long
// double truth on adversarial inputs (residuals aligned with the query so Cauchy–Schwarz is
// tight and only the fp inflation stands between the bound and a violation), split
// invariance, and exact inputs.
#include "kernels/cpu/metered_attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/meter/bands.h"
#include "kernels/meter/partial_sum.h"
#include "tests/kernels/meter/long_double_reference.h"

namespace witcert {
namespace {

struct Case {
  int32_t d = 64, nb = 8;
  int64_t s = 0;
  std::vector<float> q, k, v, ks, vs, kw;  // q [d]; rows [S, d]; key witness [S, B]
  std::vector<float> vrho, vbound;          // value summary [S] each
  MeteredHeadInputs Inputs() const {
    MeteredHeadInputs in;
    in.head_dim = d;
    in.num_bands = nb;
    in.interleaved = true;
    in.num_tokens = s;
    in.k = ks.data();
    in.v = vs.data();
    in.k_witness = kw.data();
    in.v_rho = vrho.data();
    in.v_bound = vbound.data();
    return in;
  }
};

// Band norms of (x − y) rounded up to float.
void Witness(const float* x, const float* y, int32_t d, int32_t nb, float* w) {
  std::vector<long double> acc(nb, 0);
  for (int c = 0; c < d; ++c) {
    long double r = static_cast<long double>(x[c]) - y[c];
    acc[meter::BandOfDim(c, d, nb, true)] += r * r;
  }
  for (int b = 0; b < nb; ++b) {
    long double n = std::sqrt(acc[b]);
    float f = static_cast<float>(n);
    if (f < n) f = std::nextafter(f, INFINITY);
    w[b] = f;
  }
}

float UpToFloat(long double x) {
  float f = static_cast<float>(x);
  if (f < x) f = std::nextafter(f, INFINITY);
  return f;
}

// The value summary of x (exact) and y (stored), rounded up to float: ρ = ‖x − y‖, ν = ‖y‖ + ρ.
void ValueSummary(const float* x, const float* y, int32_t d, float* rho, float* bound) {
  long double r2 = 0, y2 = 0;
  for (int c = 0; c < d; ++c) {
    long double r = static_cast<long double>(x[c]) - y[c];
    r2 += r * r;
    y2 += static_cast<long double>(y[c]) * y[c];
  }
  *rho = UpToFloat(std::sqrt(r2));
  *bound = UpToFloat(std::sqrt(y2) + std::sqrt(r2));
}

// `aligned`: the key residual is ±α·q inside every band (tight Cauchy–Schwarz).
Case MakeCase(std::mt19937& rng, int64_t s, float key_scale, float resid_scale, bool aligned,
              int outlier_channel) {
  Case c;
  c.s = s;
  const int d = c.d;
  std::normal_distribution<float> g(0.0f, 1.0f);
  c.q.resize(d);
  for (auto& x : c.q) x = g(rng);
  if (outlier_channel >= 0) c.q[outlier_channel] *= 100.0f;
  c.k.resize(s * d);
  c.v.resize(s * d);
  c.ks.resize(s * d);
  c.vs.resize(s * d);
  c.kw.resize(s * c.nb);
  c.vrho.resize(s);
  c.vbound.resize(s);
  float qn = 0;
  for (float x : c.q) qn += x * x;
  qn = std::sqrt(qn);
  for (int64_t t = 0; t < s; ++t) {
    float sign = (rng() & 1) ? 1.0f : -1.0f;
    float alpha = resid_scale * std::fabs(g(rng));
    for (int j = 0; j < d; ++j) {
      float kv = key_scale * g(rng);
      if (outlier_channel >= 0 && j == outlier_channel) kv *= 100.0f;
      c.k[t * d + j] = kv;
      float r = aligned ? sign * alpha * c.q[j] / qn : resid_scale * g(rng);
      c.ks[t * d + j] = kv - r;
      c.v[t * d + j] = g(rng);
      c.vs[t * d + j] = c.v[t * d + j] + 0.01f * resid_scale * g(rng);
    }
    Witness(&c.k[t * d], &c.ks[t * d], d, c.nb, &c.kw[t * c.nb]);
    ValueSummary(&c.v[t * d], &c.vs[t * d], d, &c.vrho[t], &c.vbound[t]);
  }
  return c;
}

// Both ways the sums are formed: token by token (the scalar path) and eight tokens per step.
// Both must be sound, serve the same output and agree on the bound to a few ulps.
void ExpectSound(const Case& c, int splits) {
  auto truth = testing::TrueAttentionError(c.q.data(), c.k.data(), c.v.data(), c.ks.data(),
                                           c.vs.data(), c.s, c.d);
  std::vector<float> out[2];
  MeteredAttentionResult res[2];
  for (int vector_sums = 0; vector_sums < 2; ++vector_sums) {
    MeteredAttentionOptions opt;
    opt.num_splits = splits;
    opt.vector_sums = vector_sums != 0;
    out[vector_sums].resize(c.d);
    MeteredAttention(c.Inputs(), c.q.data(), opt, out[vector_sums].data(), &res[vector_sums]);
    const MeteredAttentionResult& r = res[vector_sums];
    ASSERT_LE(truth.tv, static_cast<long double>(r.bound.tv))
        << "S=" << c.s << " splits=" << splits << " A-1=" << r.bound.a_minus_1 << " vector " << vector_sums;
    ASSERT_LE(truth.out_err, static_cast<long double>(r.bound.v_bound))
        << "S=" << c.s << " vector " << vector_sums;
  }
  EXPECT_EQ(out[0], out[1]);  // the meter's summation order never reaches the output
  EXPECT_NEAR(res[1].bound.tv, res[0].bound.tv, 1e-5f * res[0].bound.tv) << "S=" << c.s;
  EXPECT_NEAR(res[1].bound.v_bound, res[0].bound.v_bound, 1e-5f * res[0].bound.v_bound);
}

TEST(MeteredAttention, SoundOnAlignedResidualsAcrossScales) {
  std::mt19937 rng(7);
  for (int64_t s : {1, 2, 3, 17, 64, 333, 1024}) {
    for (float key_scale : {0.1f, 1.0f, 30.0f}) {
      for (float resid : {1e-6f, 1e-3f, 0.05f, 0.5f}) {
        for (int outlier : {-1, 5}) {
          for (bool aligned : {true, false}) {
            Case c = MakeCase(rng, s, key_scale, resid, aligned, outlier);
            for (int splits : {1, 3}) ExpectSound(c, splits);
          }
        }
      }
    }
  }
}

TEST(MeteredAttention, SoundOnAlternatingTanhWorstCase) {
  // Half the tokens err by +ε, half by −ε and p̃ puts mass 1/(1+e^ε) on the + side: the
  // true TV equals tanh(ε/2), so the bound's fp slack is all that keeps it sound.
  for (float eps : {1e-4f, 0.01f, 0.3f, 2.0f}) {
    Case c;
    c.s = 2;
    const int d = c.d;
    c.q.assign(d, 0.0f);
    c.q[0] = 1.0f;
    c.k.assign(2 * d, 0.0f);
    c.ks.assign(2 * d, 0.0f);
    c.v.assign(2 * d, 0.0f);
    c.vs.assign(2 * d, 0.0f);
    c.kw.assign(2 * c.nb, 0.0f);
    c.vrho.assign(2, 0.0f);
    c.vbound.assign(2, 0.0f);
    const float sd = std::sqrt(static_cast<float>(d));
    // ℓ̃_0 − ℓ̃_1 = −ε/2·... choose p̃_0 = 1/(1+e^ε): ℓ̃_0 = 0, ℓ̃_1 = ε.
    c.ks[0] = 0.0f;
    c.ks[d] = eps * sd;
    c.k[0] = c.ks[0] + eps * sd;  // e_0 = +ε
    c.k[d] = c.ks[d] - eps * sd;  // e_1 = −ε
    Witness(&c.k[0], &c.ks[0], d, c.nb, &c.kw[0]);
    Witness(&c.k[d], &c.ks[d], d, c.nb, &c.kw[c.nb]);
    ExpectSound(c, 1);
    ExpectSound(c, 2);
  }
}

TEST(MeteredAttention, LongContextSingleCase) {
  std::mt19937 rng(11);
  Case c = MakeCase(rng, 131072, 1.0f, 0.01f, true, 3);
  ExpectSound(c, 64);
}

TEST(MeteredAttention, SplitCountDoesNotChangeResults) {
  // Outputs: fp32 reassociation over ≤ 1000 terms, rtol 1e-4. Bounds: the fp inflation
  // depends on the split count (chain length, merge depth: ≤ 64·κ ≈ 0.4%), rtol 1%.
  std::mt19937 rng(3);
  Case c = MakeCase(rng, 1000, 1.0f, 0.02f, false, -1);
  std::vector<float> ref(c.d);
  MeteredAttentionResult ref_res;
  MeteredAttention(c.Inputs(), c.q.data(), MeteredAttentionOptions{1, true, 0.0}, ref.data(),
                   &ref_res);
  ASSERT_GT(ref_res.bound.tv, 0.0f);
  for (int splits : {2, 7, 64}) {
    std::vector<float> out(c.d);
    MeteredAttentionResult res;
    MeteredAttention(c.Inputs(), c.q.data(), MeteredAttentionOptions{splits, true, 0.0},
                     out.data(), &res);
    for (int j = 0; j < c.d; ++j) {
      EXPECT_NEAR(out[j], ref[j], 1e-4f * (std::fabs(ref[j]) + 1e-2f)) << splits;
    }
    EXPECT_NEAR(res.bound.tv, ref_res.bound.tv, 0.01f * ref_res.bound.tv) << splits;
    EXPECT_NEAR(res.bound.a_minus_1, ref_res.bound.a_minus_1, 0.01f * ref_res.bound.a_minus_1);
    EXPECT_NEAR(res.bound.v_bound, ref_res.bound.v_bound, 0.01f * ref_res.bound.v_bound);
  }
}

TEST(MeteredAttention, ExactRowsGiveZeroBound) {
  std::mt19937 rng(5);
  Case c = MakeCase(rng, 100, 1.0f, 0.1f, false, -1);
  MeteredHeadInputs in = c.Inputs();
  in.k = c.k.data();
  in.v = c.v.data();
  std::vector<uint8_t> exact(c.s, 1);
  in.token_exact = exact.data();  // witnesses present but rows flagged exact
  std::vector<float> out(c.d), risk(c.s);
  MeteredAttentionResult res;
  MeteredAttention(in, c.q.data(), MeteredAttentionOptions{4, true, 0.0}, out.data(), &res,
                   risk.data());
  EXPECT_EQ(res.bound.tv, 0.0f);
  EXPECT_EQ(res.bound.v_bound, 0.0f);
  for (float r : risk) EXPECT_EQ(r, 0.0f);
}

TEST(MeteredAttention, RiskSumsToAMinusOne) {
  std::mt19937 rng(9);
  Case c = MakeCase(rng, 300, 1.0f, 0.05f, false, -1);
  std::vector<float> out(c.d), risk(c.s);
  MeteredAttentionResult res;
  MeteredAttention(c.Inputs(), c.q.data(), MeteredAttentionOptions{3, true, 0.0}, out.data(),
                   &res, risk.data());
  double sum = 0;
  for (float r : risk) sum += r;
  // a_minus_1 carries the fp inflation (≤ 1e-3 relative here); the risk sum does not.
  EXPECT_LE(sum, res.bound.a_minus_1);
  EXPECT_GE(sum, res.bound.a_minus_1 * 0.99);
}

TEST(MeteredAttention, NonFiniteLogitsAreVacuous) {
  std::mt19937 rng(1);
  Case c = MakeCase(rng, 8, 1.0f, 0.01f, false, -1);
  c.ks[3] = 1e38f;
  c.q[3] = 1e38f;  // overflows the dot
  std::vector<float> out(c.d);
  MeteredAttentionResult res;
  MeteredAttention(c.Inputs(), c.q.data(), MeteredAttentionOptions{}, out.data(), &res);
  EXPECT_EQ(res.bound.tv, 1.0f);
}

}  // namespace
}  // namespace witcert
