// The vectorized exp against long double: ulp error over the whole finite range, the
// overflow / underflow / NaN edges, the sums against a long-double sum, and the vector and
// scalar paths agreeing element for element (tails of every length).
#include "kernels/cpu/vector_exp.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace witcert {
namespace {

double UlpError(float got, long double want) {
  const float w = static_cast<float>(want);
  const float ulp = std::nextafter(w, std::numeric_limits<float>::infinity()) - w;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

TEST(VectorExpTest, WithinTwoUlpOverTheRange) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.5f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.34657f, -0.34657f, 1.0f, -1.0f}) x.push_back(v);
  std::vector<float> out(x.size());
  ExpShiftedSum(x.data(), static_cast<int64_t>(x.size()), 0.0f, 1.0f, out.data());
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const long double want = std::exp(static_cast<long double>(x[i]));
    const double e = UlpError(out[i], want);
    worst = std::max(worst, e);
    ASSERT_LE(e, 2.0) << "x = " << x[i] << " got " << out[i];
    ASSERT_EQ(out[i], ExpF(x[i])) << "vector and scalar paths differ at x = " << x[i];
  }
  EXPECT_GT(worst, 0.0);  // the comparison ran on inexact values
}

TEST(VectorExpTest, Edges) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-inf, -1000.0f, -87.5f, 89.0f, 1000.0f, inf, nan, 0.0f, -3.0f};
  x.resize(16, 0.5f);  // one full 8-lane group plus a group holding the edges
  std::vector<float> out(x.size());
  ExpShiftedSum(x.data(), static_cast<int64_t>(x.size()), 0.0f, 1.0f, out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], inf);
  EXPECT_EQ(out[4], inf);
  EXPECT_EQ(out[5], inf);
  EXPECT_TRUE(std::isnan(out[6]));
  EXPECT_EQ(out[7], 1.0f);
  EXPECT_EQ(ExpF(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(ExpF(nan)));
}

TEST(VectorExpTest, ShiftedSumsMatchLongDouble) {
  std::mt19937 rng(7);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  for (int64_t n : {0, 1, 7, 8, 63, 64, 65, 1000, 49152, 128256}) {
    std::vector<float> x(n);
    for (float& v : x) v = logit(rng);
    const float mx = MaxValue(x.data(), n);
    float want_max = -std::numeric_limits<float>::infinity();
    for (float v : x) want_max = std::max(want_max, v);
    ASSERT_EQ(mx, want_max) << n;
    const float inv_t = 1.0f / 0.7f;
    long double want = 0.0L;
    for (float v : x) want += std::exp(static_cast<long double>((v - mx) * inv_t));
    std::vector<float> out(n);
    const double got = ExpShiftedSum(x.data(), n, mx, inv_t, out.data());
    const double got_only = ExpShiftedSumOnly(x.data(), n, mx, inv_t);
    EXPECT_EQ(got, got_only) << n;
    EXPECT_NEAR(got, static_cast<double>(want), 1e-6 * static_cast<double>(want) + 1e-30) << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], ExpF((x[i] - mx) * inv_t)) << n << " " << i;
    std::vector<float> terms(n, -1.0f);  // the store-only variant: the same terms
    ExpShifted(x.data(), n, mx, inv_t, terms.data());
    EXPECT_EQ(terms, out) << n;
  }
}

TEST(VectorExpTest, MaxIgnoresNanAndHandlesEmpty) {
  EXPECT_EQ(MaxValue(nullptr, 0), -std::numeric_limits<float>::infinity());
  std::vector<float> x(19, -5.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[17] = 2.5f;
  x[9] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(MaxValue(x.data(), 19), 2.5f);
}

}  // namespace
}  // namespace witcert
