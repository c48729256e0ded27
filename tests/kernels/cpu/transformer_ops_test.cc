// Transformer ops vs naive double-precision implementations.
//
// Tolerances: each op does O(1) fp32 roundings per output on top of a double (or exact)
// reduction, so outputs are within a few ulp: we allow 4e-7 relative (≈ 3.4 ulp) plus a tiny
// absolute floor where the true value can be ~0.
#include "kernels/cpu/transformer_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"

namespace witcert {
namespace {

constexpr double kRel = 4e-7;

std::vector<float> Randn(int64_t count, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(count);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(RmsNormTest, MatchesNaiveAndAllowsAliasing) {
  std::mt19937 rng(1);
  const int64_t n = 3, dim = 576;
  const float eps = 1e-5f;
  std::vector<float> x = Randn(n * dim, rng, 3.0f), w = Randn(dim, rng);  // [n, dim], [dim]
  std::vector<float> out(n * dim);
  RmsNorm(x.data(), w.data(), n, dim, eps, out.data());
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += double(x[i * dim + j]) * x[i * dim + j];
    const double s = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t j = 0; j < dim; ++j) {
      const double want = x[i * dim + j] * s * w[j];
      ASSERT_NEAR(out[i * dim + j], want, kRel * std::fabs(want) + 1e-30) << i << "," << j;
    }
  }
  RmsNorm(x.data(), w.data(), n, dim, eps, x.data());  // in place
  for (int64_t e = 0; e < n * dim; ++e) ASSERT_EQ(x[e], out[e]);
  std::vector<float> zeros(dim, 0.0f), z(dim);
  RmsNorm(zeros.data(), w.data(), 1, dim, eps, z.data());
  for (float v : z) EXPECT_EQ(v, 0.0f);  // eps keeps it finite
}

// Naive RoPE in double, written from the header's definition.
std::vector<double> NaiveRope(const std::vector<float>& x, int64_t heads, int64_t hd, int64_t pos,
                              double theta, bool interleaved) {
  std::vector<double> out(x.begin(), x.end());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double ang = pos * std::pow(theta, -2.0 * i / hd);
      const int64_t a = h * hd + (interleaved ? 2 * i : i);
      const int64_t b = h * hd + (interleaved ? 2 * i + 1 : i + hd / 2);
      out[a] = x[a] * std::cos(ang) - x[b] * std::sin(ang);
      out[b] = x[a] * std::sin(ang) + x[b] * std::cos(ang);
    }
  }
  return out;
}

TEST(RopeTest, MatchesNaiveDoubleForBothPairingsIncludingLargePositions) {
  std::mt19937 rng(2);
  const int64_t heads = 9, hd = 64;
  for (bool interleaved : {false, true}) {
    for (int64_t pos : {0, 1, 17, 8191, 100000, 1000000}) {
      SCOPED_TRACE(testing::Message() << "interleaved=" << interleaved << " pos=" << pos);
      const std::vector<float> x = Randn(heads * hd, rng);  // [heads, head_dim]
      std::vector<float> y = x;
      ApplyRope(y.data(), heads, hd, pos, 10000.0f, interleaved);
      const std::vector<double> want = NaiveRope(x, heads, hd, pos, 10000.0, interleaved);
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < hd / 2; ++i) {
          const int64_t a = h * hd + (interleaved ? 2 * i : i);
          const int64_t b = h * hd + (interleaved ? 2 * i + 1 : i + hd / 2);
          // A pair's outputs carry ≈ 2 roundings of the pair's norm (cos/sin to float, then
          // the products): 4e-7 of the norm. A float angle would miss by ~1e-2 at pos 1e6.
          const double norm_in = std::hypot(double(x[a]), double(x[b]));
          ASSERT_NEAR(y[a], want[a], kRel * norm_in + 1e-30) << h << "," << i;
          ASSERT_NEAR(y[b], want[b], kRel * norm_in + 1e-30) << h << "," << i;
          // Rotation preserves each pair's norm.
          ASSERT_NEAR(std::hypot(double(y[a]), double(y[b])), norm_in, kRel * norm_in);
        }
      }
    }
  }
}

// Frequency factors (RoPE scaling): pair i's angle is divided by factor i. Against the naive
// double rotation at θ' = the scaled angle, per pair; unit factors give ApplyRope's bits; and
// the rotation stays relative: ⟨R(p)q, R(p')k⟩ depends on p − p' only.
TEST(RopeTest, FrequencyFactorsDivideEachPairsAngle) {
  std::mt19937 rng(5);
  const int64_t hd = 32;
  std::vector<float> factors(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) factors[i] = 1.0f + 0.5f * static_cast<float>(i);  // 1 … 8.5
  for (bool interleaved : {false, true}) {
    for (int64_t pos : {0, 3, 1000, 131071}) {
      const std::vector<float> x = Randn(hd, rng);
      std::vector<float> y = x, unit = x, plain = x;
      ApplyRope(y.data(), 1, hd, pos, 500000.0f, interleaved, factors.data());
      const std::vector<float> ones(hd / 2, 1.0f);
      ApplyRope(unit.data(), 1, hd, pos, 500000.0f, interleaved, ones.data());
      ApplyRope(plain.data(), 1, hd, pos, 500000.0f, interleaved);
      EXPECT_EQ(unit, plain);
      for (int64_t i = 0; i < hd / 2; ++i) {
        const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + hd / 2;
        const double ang = static_cast<double>(pos) * std::pow(500000.0, -2.0 * i / hd) / factors[i];
        const double want_a = x[a] * std::cos(ang) - x[b] * std::sin(ang);
        const double want_b = x[a] * std::sin(ang) + x[b] * std::cos(ang);
        const double norm_in = std::hypot(double(x[a]), double(x[b]));
        ASSERT_NEAR(y[a], want_a, kRel * norm_in + 1e-30) << pos << " " << i;
        ASSERT_NEAR(y[b], want_b, kRel * norm_in + 1e-30) << pos << " " << i;
      }
    }
  }
  const std::vector<float> q = Randn(hd, rng), k = Randn(hd, rng);
  auto dot_at = [&](int64_t pq, int64_t pk) {
    std::vector<float> rq = q, rk = k;
    ApplyRope(rq.data(), 1, hd, pq, 500000.0f, false, factors.data());
    ApplyRope(rk.data(), 1, hd, pk, 500000.0f, false, factors.data());
    double s = 0;
    for (int64_t c = 0; c < hd; ++c) s += double(rq[c]) * rk[c];
    return s;
  };
  EXPECT_NEAR(dot_at(70, 20), dot_at(1050, 1000), 1e-4);
  EXPECT_GT(std::fabs(dot_at(70, 20) - dot_at(70, 60)), 1e-3);
}

// yarn's attention factor scales each rotated pair by that factor (the table's cos and sin both
// carry it), so ⟨R(p)q, R(p')k⟩ grows by its square and still depends on p − p' only; 1 is the
// plain rotation's bits.
TEST(RopeTest, AttentionFactorScalesTheRotation) {
  std::mt19937 rng(8);
  const int64_t hd = 32;
  const float m = 1.1386294f;
  std::vector<float> factors(hd / 2, 2.0f);
  for (int64_t pos : {0, 17, 40000}) {
    const std::vector<float> x = Randn(hd, rng);
    std::vector<float> scaled = x, plain = x, unit = x;
    ApplyRope(scaled.data(), 1, hd, pos, 1e6f, false, factors.data(), m);
    ApplyRope(plain.data(), 1, hd, pos, 1e6f, false, factors.data());
    ApplyRope(unit.data(), 1, hd, pos, 1e6f, false, factors.data(), 1.0f);
    EXPECT_EQ(unit, plain);
    for (int64_t c = 0; c < hd; ++c) {
      ASSERT_NEAR(scaled[c], plain[c] * m, 1e-6f * (std::fabs(plain[c]) + 1.0f)) << pos << " " << c;
    }
    std::vector<float> cs(hd);
    RopeCosSin(hd, pos, 1e6f, cs.data(), factors.data(), m);
    for (int64_t i = 0; i < hd / 2; ++i) {
      EXPECT_NEAR(std::hypot(double(cs[2 * i]), double(cs[2 * i + 1])), m, 1e-6) << i;
    }
  }
}

TEST(RopeTest, PairingsDifferAndPositionZeroIsIdentity) {
  std::mt19937 rng(3);
  const std::vector<float> x = Randn(64, rng);
  std::vector<float> a = x, b = x, z = x;
  ApplyRope(a.data(), 1, 64, 5, 10000.0f, true);
  ApplyRope(b.data(), 1, 64, 5, 10000.0f, false);
  double diff = 0;
  for (int i = 0; i < 64; ++i) diff += std::fabs(a[i] - b[i]);
  EXPECT_GT(diff, 1.0);
  ApplyRope(z.data(), 1, 64, 0, 10000.0f, false);
  EXPECT_EQ(z, x);
}

TEST(SwiGluTest, MatchesNaiveIncludingExtremesAndAliasing) {
  std::mt19937 rng(4);
  std::vector<float> g = Randn(1000, rng, 4.0f), u = Randn(1000, rng);
  g[0] = -100.0f;
  g[1] = 100.0f;
  g[2] = 0.0f;
  g[3] = -1000.0f;  // exp overflows to inf: silu must still be -0, not NaN
  std::vector<float> out(1000);
  SwiGlu(g.data(), u.data(), 1000, out.data());
  for (int j = 0; j < 1000; ++j) {
    const double want = g[j] / (1.0 + std::exp(-double(g[j]))) * u[j];
    ASSERT_FALSE(std::isnan(out[j])) << j;
    ASSERT_NEAR(out[j], want, kRel * std::fabs(want) + 1e-30) << j << " g=" << g[j];
  }
  SwiGlu(g.data(), u.data(), 1000, g.data());
  EXPECT_EQ(g, out);
}

TEST(SoftmaxTest, MatchesNaiveAndIsStable) {
  std::mt19937 rng(5);
  for (float scale : {1.0f, 30.0f}) {
    std::vector<float> x = Randn(777, rng, scale);
    x[10] = 1000.0f;  // would overflow exp without max subtraction
    x[11] = 999.0f;
    x[12] = -std::numeric_limits<float>::infinity();  // masked entry
    std::vector<float> y = x;
    Softmax(y.data(), 777);
    double mx = -INFINITY, s = 0;
    for (float v : x) mx = std::fmax(mx, v);
    for (float v : x) s += std::exp(double(v) - mx);
    double total = 0;
    for (int j = 0; j < 777; ++j) {
      const double want = std::exp(double(x[j]) - mx) / s;
      ASSERT_NEAR(y[j], want, 4 * kRel * want + 1e-30) << j;
      total += y[j];
    }
    EXPECT_EQ(y[12], 0.0f);
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
  std::vector<float> all_masked(4, -std::numeric_limits<float>::infinity());
  Softmax(all_masked.data(), 4);
  for (float v : all_masked) EXPECT_EQ(v, 0.25f);
  std::vector<float> with_nan = {1.0f, NAN, 2.0f};
  Softmax(with_nan.data(), 3);
  for (float v : with_nan) EXPECT_TRUE(std::isnan(v));  // NaN is never hidden
}

// Dot against a double sum, for lengths with and without an 8-lane tail; fp32 rounding of
// n products and sums stays within n·2^-23·Σ|a·b|.
TEST(DotTest, MatchesDoubleSumWithinRounding) {
  std::mt19937 rng(6);
  for (int64_t n : {0, 1, 7, 8, 64, 67, 128}) {
    std::vector<float> a = Randn(n, rng), b = Randn(n, rng, 3.0f);
    double want = 0.0, abs_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      want += double(a[i]) * b[i];
      abs_sum += std::fabs(double(a[i]) * b[i]);
    }
    EXPECT_NEAR(Dot(a.data(), b.data(), n), want, (n + 2) * std::ldexp(1.0, -23) * abs_sum + 1e-30)
        << n;
  }
}

// Scores of strided rows: within rounding of the double dot, and the same bits whether the
// rows come in one run or split anywhere into two (the prompt attention splits its keys at a
// cached prefix and must give a hit the bits of a miss).
TEST(DotRowsTest, MatchesDoubleAndDoesNotDependOnHowRowsAreSplit) {
  std::mt19937 rng(21);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t d : {8, 64, 128, 36}) {
    const int64_t n = 23, stride = d + 16;
    std::vector<float> q(d), rows(n * stride);
    for (float& x : q) x = g(rng);
    for (float& x : rows) x = g(rng);
    std::vector<float> whole(n), split(n);
    DotRows(q.data(), rows.data(), stride, n, d, 0.125f, whole.data());
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int64_t c = 0; c < d; ++c) {
        ref += static_cast<double>(q[c]) * rows[j * stride + c];
        mag += std::fabs(static_cast<double>(q[c]) * rows[j * stride + c]);
      }
      EXPECT_NEAR(whole[j], 0.125 * ref, 0.125 * mag * (d + 2) * 6e-8) << d << " " << j;
    }
    for (int64_t cut : {1, 3, 5, 16, 22}) {
      DotRows(q.data(), rows.data(), stride, cut, d, 0.125f, split.data());
      DotRows(q.data(), rows.data() + cut * stride, stride, n - cut, d, 0.125f, split.data() + cut);
      EXPECT_EQ(split, whole) << "d " << d << " cut " << cut;
    }
  }
}

// Weighted row sums: one fma per element in row order, so splitting the rows into runs gives
// the same bits, and the sum is within rounding of the double one.
TEST(AccumulateRowsTest, SplitRunsGiveTheSameBits) {
  std::mt19937 rng(22);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t d : {8, 64, 80, 128, 12}) {
    const int64_t n = 37, stride = d + 8;
    std::vector<float> w(n), rows(n * stride);
    for (float& x : w) x = std::fabs(g(rng));
    for (float& x : rows) x = g(rng);
    std::vector<float> whole(d, 0.0f), split(d, 0.0f);
    AccumulateRows(w.data(), rows.data(), stride, n, d, whole.data());
    AccumulateRows(w.data(), rows.data(), stride, 16, d, split.data());
    AccumulateRows(w.data() + 16, rows.data() + 16 * stride, stride, n - 16, d, split.data());
    EXPECT_EQ(split, whole) << d;
    for (int64_t c = 0; c < d; ++c) {
      double ref = 0.0, mag = 0.0;
      for (int64_t t = 0; t < n; ++t) {
        ref += static_cast<double>(w[t]) * rows[t * stride + c];
        mag += std::fabs(static_cast<double>(w[t]) * rows[t * stride + c]);
      }
      EXPECT_NEAR(whole[c], ref, mag * (n + 2) * 6e-8) << d << " " << c;
    }
  }
}

TEST(EmbeddingLookupTest, ReturnsDequantizedRowAndNaNOutOfRange) {
  // 3 rows × 64 cols of Q8_0, built by hand: row r, element c = (r+1) * 0.5 * (c - 32).
  std::vector<BlockQ8_0> blocks(3 * 2);
  for (int r = 0; r < 3; ++r) {
    for (int b = 0; b < 2; ++b) {
      blocks[r * 2 + b].d = F32ToF16(0.5f * (r + 1));
      for (int i = 0; i < 32; ++i) blocks[r * 2 + b].qs[i] = static_cast<int8_t>(b * 32 + i - 32);
    }
  }
  QuantMatrix table{GgmlType::kQ8_0, 3, 64, 2 * sizeof(BlockQ8_0),
                    reinterpret_cast<const uint8_t*>(blocks.data())};
  std::vector<float> out(64);
  EmbeddingLookup(table, 2, out.data());
  for (int c = 0; c < 64; ++c) EXPECT_EQ(out[c], 1.5f * (c - 32)) << c;
  EmbeddingLookup(table, 3, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  EmbeddingLookup(table, -1, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

TEST(AddInPlaceTest, AddsElementwise) {
  std::vector<float> y = {1, 2, 3, 4, 5}, x = {0.5f, -2, 0, 1e30f, -5};
  AddInPlace(y.data(), x.data(), 5);
  EXPECT_EQ(y, (std::vector<float>{1.5f, 0, 3, 1e30f, 0}));
}

}  // namespace
}  // namespace witcert
