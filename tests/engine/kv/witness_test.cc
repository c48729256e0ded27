// The stored witness formats: key band codes and value summaries never below what they bound,
// and within a unit of it; position invariance under the model's RoPE pairing, and the wrong
// pairing caught.
#include "engine/kv/witness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/kv/half_array.h"
#include "gtest/gtest.h"
#include "kernels/meter/bands.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/float_formats.h"

namespace witcert {
namespace {

// RoPE at `pos` (theta 10000) with the given pairing, in double.
std::vector<float> Rotate(const std::vector<float>& x, int64_t pos, RopePairing pairing) {
  const int d = static_cast<int>(x.size()), half = d / 2;
  std::vector<float> y(x);
  for (int i = 0; i < half; ++i) {
    double ang = pos * std::pow(10000.0, -2.0 * i / d);
    int a = pairing == RopePairing::kInterleaved ? 2 * i : i;
    int b = pairing == RopePairing::kInterleaved ? 2 * i + 1 : i + half;
    y[a] = static_cast<float>(x[a] * std::cos(ang) - x[b] * std::sin(ang));
    y[b] = static_cast<float>(x[a] * std::sin(ang) + x[b] * std::cos(ang));
  }
  return y;
}

// The decoded key witness (band bounds c_b·U) of residual r against zero.
std::vector<float> BandNorms(const std::vector<float>& r, int nb, RopePairing pairing) {
  const int d = static_cast<int>(r.size());
  std::vector<float> zero(d, 0.0f), out(nb);
  std::vector<uint8_t> w(2 + nb);
  ComputeKeyWitness(r.data(), zero.data(), BandLayout{d, nb, pairing}, w.data());
  DecodeKeyWitness(w.data(), nb, out.data());
  return out;
}

long double TrueBandNorm(const std::vector<float>& r, int d, int nb, RopePairing p, int b) {
  long double s = 0;
  for (int c = 0; c < d; ++c) {
    if (meter::BandOfDim(c, d, nb, p == RopePairing::kInterleaved) == b) s += static_cast<long double>(r[c]) * r[c];
  }
  return std::sqrt(s);
}

// HalfArrayToFloat (F16C where built) gives HalfToFloat's bits for every non-NaN fp16 pattern,
// in runs of 8 (the vector path) and a tail of 5 (the scalar path).
TEST(HalfArray, DecodeMatchesHalfToFloatForEveryPattern) {
  std::vector<uint16_t> all;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if (((h >> 10) & 0x1fu) == 0x1fu && (h & 0x3ffu) != 0) continue;  // NaN payloads
    all.push_back(static_cast<uint16_t>(h));
  }
  const int32_t n = static_cast<int32_t>(all.size());
  for (int32_t start = 0; start < n; start += 13) {
    const int32_t len = std::min<int32_t>(13, n - start);
    float out[13];
    HalfArrayToFloat(reinterpret_cast<const uint8_t*>(&all[start]), len, out);
    for (int32_t i = 0; i < len; ++i) {
      const float want = meter::HalfToFloat(all[start + i]);
      ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << "pattern " << all[start + i];
    }
  }
}

// The stored key witness, against an independent reading of its definition: the band norms
// summed over meter::BandOfDim's map in double; U the smallest bf16 with 255·U ≥ max_b w_b;
// each code the smallest c with c·U ≥ w_b.
TEST(Witness, KeyCodesAreTheSmallestThatBoundEachBand) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int d : {16, 64, 80, 128, 256}) {
    for (int nb : {1, 2, 4, 8}) {
      if ((d / 2) % nb != 0) continue;
      for (RopePairing p : {RopePairing::kInterleaved, RopePairing::kHalfSplit}) {
        for (int rep = 0; rep < 20; ++rep) {
          std::vector<float> x(d), xh(d);
          const float scale = std::exp2(static_cast<float>(rep % 9) * 4.0f - 16.0f);
          for (int c = 0; c < d; ++c) {
            x[c] = g(rng) * scale;
            xh[c] = x[c] + 1e-3f * scale * g(rng) * static_cast<float>(1 + c % 7) * (c % 11 == 0 ? 30.0f : 1.0f);
          }
          std::vector<uint8_t> got(2 + nb);
          ComputeKeyWitness(x.data(), xh.data(), BandLayout{d, nb, p}, got.data());
          std::vector<double> w(nb, 0.0);
          for (int c = 0; c < d; ++c) {
            const double r = static_cast<double>(x[c]) - static_cast<double>(xh[c]);
            w[meter::BandOfDim(c, d, nb, p == RopePairing::kInterleaved)] += r * r;
          }
          double wmax = 0;
          for (auto& v : w) {
            v = std::sqrt(v) * (1.0 + 1e-12);
            wmax = std::max(wmax, v);
          }
          uint16_t unit;
          std::memcpy(&unit, got.data(), 2);
          const double u = meter::Bf16ToFloat(unit);
          ASSERT_GE(255.0 * u, wmax);
          ASSERT_LT(255.0 * meter::Bf16ToFloat(static_cast<uint16_t>(unit - 1)), wmax) << "U not the smallest";
          for (int b = 0; b < nb; ++b) {
            const int c = got[2 + b];
            ASSERT_GE(c * u, w[b]) << "d " << d << " B " << nb << " band " << b;
            if (c > 0) {
              ASSERT_LT((c - 1) * u, w[b]) << "code not the smallest";
            }
          }
        }
      }
    }
  }
}

TEST(Witness, RoundsUpNeverDownAndStaysWithinAUnit) {
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int it = 0; it < 4000; ++it) {
    std::vector<float> r(64);
    const float scale = std::exp2(static_cast<float>(it % 60 - 30) * 3.0f);  // 2^-90 … 2^87: normal bf16 units
    for (auto& x : r) x = g(rng) * scale * (it % 3 == 0 && (&x - r.data()) % 9 == 0 ? 50.0f : 1.0f);
    auto w = BandNorms(r, 8, RopePairing::kInterleaved);
    long double tmax = 0;
    for (int b = 0; b < 8; ++b) tmax = std::max(tmax, TrueBandNorm(r, 64, 8, RopePairing::kInterleaved, b));
    for (int b = 0; b < 8; ++b) {
      const long double t = TrueBandNorm(r, 64, 8, RopePairing::kInterleaved, b);
      ASSERT_GE(static_cast<long double>(w[b]), t) << "scale " << scale << " band " << b;
      // Looser by at most one unit, U < (1 + 2^-7)·max/255 (bf16 has 8 significant bits).
      ASSERT_LE(static_cast<long double>(w[b]), t + tmax * (1.0L + 1.0L / 64) / 255) << scale;
    }
  }
}

TEST(Witness, ZeroAndNonFiniteResiduals) {
  std::vector<float> r(64, 0.0f);
  for (float w : BandNorms(r, 8, RopePairing::kInterleaved)) EXPECT_EQ(w, 0.0f);
  r[5] = 1.0f;  // one band nonzero: the others keep code 0, an exact zero bound
  auto w = BandNorms(r, 8, RopePairing::kInterleaved);
  EXPECT_GE(w[0], 1.0f);
  EXPECT_LE(w[0], 1.0f + 1.0f / 64);
  for (int b = 1; b < 8; ++b) EXPECT_EQ(w[b], 0.0f);
  r[9] = 3.0e38f;  // the band norm still fits fp32, U = max/255 does too
  w = BandNorms(r, 8, RopePairing::kInterleaved);
  EXPECT_GE(w[1], 3.0e38f);
  r[9] = INFINITY;
  for (float x : BandNorms(r, 8, RopePairing::kInterleaved)) EXPECT_EQ(x, INFINITY) << "vacuous, never NaN";
  r[9] = NAN;
  for (float x : BandNorms(r, 8, RopePairing::kInterleaved)) EXPECT_EQ(x, INFINITY);
}

TEST(Witness, ValueSummaryBoundsResidualAndStoredNorm) {
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int it = 0; it < 3000; ++it) {
    const int d = it % 2 ? 128 : 64;
    std::vector<float> x(d), xh(d);
    const float scale = std::exp2(static_cast<float>(it % 60 - 30) * 3.0f);
    const float noise = std::exp2(-static_cast<float>(it % 17));
    for (int c = 0; c < d; ++c) {
      x[c] = g(rng) * scale;
      xh[c] = it % 29 == 0 ? x[c] : x[c] + noise * scale * g(rng);  // some rows exact
    }
    uint8_t buf[4];
    ComputeValueSummary(x.data(), xh.data(), BandLayout{d, 8, RopePairing::kHalfSplit}, buf);
    float rho, nu;
    DecodeValueSummary(buf, &rho, &nu);
    long double r2 = 0, v2 = 0;
    for (int c = 0; c < d; ++c) {
      const long double r = static_cast<long double>(x[c]) - xh[c];
      r2 += r * r;
      v2 += static_cast<long double>(xh[c]) * xh[c];
    }
    const long double rt = std::sqrt(r2), vt = std::sqrt(v2);
    ASSERT_GE(static_cast<long double>(rho), rt);
    ASSERT_GE(static_cast<long double>(nu), vt + rt);
    ASSERT_LE(static_cast<long double>(rho), rt * (1.0L + 1.0L / 64));  // one bf16 step (2^-7)
    ASSERT_LE(static_cast<long double>(nu), (vt + rt) * (1.0L + 1.0L / 64));
    if (it % 29 == 0) {
      EXPECT_EQ(rho, 0.0f);
    }
  }
}

TEST(Witness, PositionInvariantUnderMatchingPairing) {
  // fp32 rotation error ≤ ~4u per element; the stored bounds may then differ by a unit
  // (≤ max_b w_b / 254): tolerance max/128.
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (RopePairing pairing : {RopePairing::kInterleaved, RopePairing::kHalfSplit}) {
    for (int nb : {1, 4, 8, 32}) {
      std::vector<float> r(64);
      for (auto& x : r) x = g(rng);
      auto w0 = BandNorms(r, nb, pairing);
      for (int64_t pos : {1, 7, 100, 4095, 131071}) {
        auto w = BandNorms(Rotate(r, pos, pairing), nb, pairing);
        const float w0max = *std::max_element(w0.begin(), w0.end());
        for (int b = 0; b < nb; ++b) EXPECT_NEAR(w[b], w0[b], w0max / 128) << pos << " " << b;
      }
    }
  }
}

// Wrong pairing: (model pairing, witness pairing, bands) combos where a rotation pair
// straddles two witness bands.
struct Mismatch { RopePairing model, witness; int nb; };

TEST(Witness, WrongPairingBreaksInvarianceAndSoundness) {
  const Mismatch cases[] = {{RopePairing::kHalfSplit, RopePairing::kInterleaved, 8},
                            {RopePairing::kInterleaved, RopePairing::kHalfSplit, 32}};
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const Mismatch& m : cases) {
    const int d = 64;
    std::vector<float> r(d);
    for (auto& x : r) x = g(rng);
    auto w0 = BandNorms(r, m.nb, m.witness);
    double worst = 0;
    for (int64_t pos = 1; pos < 50; ++pos) {
      auto w = BandNorms(Rotate(r, pos, m.model), m.nb, m.witness);
      for (int b = 0; b < m.nb; ++b) worst = std::max(worst, std::fabs(w[b] - w0[b]) / (w0[b] + 1e-6));
    }
    EXPECT_GT(worst, 0.1) << "invariance should break";
    // Soundness: a witness written for residual r (pre-rotation), a query that meets the
    // rotated residual R_p r where the wrong bands put no witness mass.
    std::vector<float> e(d, 0.0f);
    e[0] = 1.0f;  // residual in dim 0 only
    int partner = m.model == RopePairing::kInterleaved ? 1 : d / 2;
    auto rot = Rotate(e, 1, m.model);  // energy moves to the partner dim
    std::vector<float> q(d, 0.0f);
    q[partner] = 1.0f;
    auto eps_with = [&](RopePairing p, int nb) {
      auto w = BandNorms(e, nb, p);
      // ε·√d = Σ_b ‖q_b‖ w_b; q's only band is its partner dim's band under p
      const std::vector<float> wq = BandNorms(q, nb, p);
      double s = 0;
      for (int b = 0; b < nb; ++b) s += wq[b] * w[b];
      return s;
    };
    const double err = std::fabs(rot[partner]);  // |q·R r|
    EXPECT_GT(err, 0.5);
    EXPECT_LT(eps_with(m.witness, m.nb), err) << "wrong pairing: bound below the true error";
    EXPECT_GE(eps_with(m.model, m.nb), err) << "right pairing: sound";
  }
}

}  // namespace
}  // namespace witcert
