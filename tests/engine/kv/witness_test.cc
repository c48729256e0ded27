// Witness position invariance under the model's RoPE pairing, and the wrong pairing caught.
#include "engine/kv/witness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

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

std::vector<float> BandNorms(const std::vector<float>& r, int nb, RopePairing pairing) {
  const int d = static_cast<int>(r.size());
  std::vector<float> zero(d, 0.0f), out(nb);
  std::vector<uint16_t> w(nb);
  ComputeWitness(r.data(), zero.data(), BandLayout{d, nb, pairing}, w.data());
  DecodeWitness(w.data(), nb, out.data());
  return out;
}

// DecodeWitness (F16C where built) gives HalfToFloat's bits for every non-NaN fp16 pattern,
// in runs of 8 (the vector path) and a tail of 5 (the scalar path).
TEST(Witness, DecodeMatchesHalfToFloatForEveryPattern) {
  std::vector<uint16_t> all;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if (((h >> 10) & 0x1fu) == 0x1fu && (h & 0x3ffu) != 0) continue;  // NaN payloads
    all.push_back(static_cast<uint16_t>(h));
  }
  const int32_t n = static_cast<int32_t>(all.size());
  for (int32_t start = 0; start < n; start += 13) {
    const int32_t len = std::min<int32_t>(13, n - start);
    float out[13];
    DecodeWitness(&all[start], len, out);
    for (int32_t i = 0; i < len; ++i) {
      const float want = meter::HalfToFloat(all[start + i]);
      ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << "pattern " << all[start + i];
    }
  }
}

// ComputeWitness walks each band's dims as runs; it must give the bits of the plain loop over
// dims that asks meter::BandOfDim for each dim's band (sums in double, in dim order).
TEST(Witness, BandRunsMatchThePerDimBandMap) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int d : {16, 64, 80, 128, 256}) {
    for (int nb : {1, 2, 4, 8}) {
      if ((d / 2) % nb != 0) continue;
      for (RopePairing p : {RopePairing::kInterleaved, RopePairing::kHalfSplit}) {
        std::vector<float> x(d), xh(d);
        for (int c = 0; c < d; ++c) {
          x[c] = g(rng);
          xh[c] = x[c] + 1e-3f * g(rng) * static_cast<float>(1 + c % 7);
        }
        std::vector<uint16_t> got(nb);
        ComputeWitness(x.data(), xh.data(), BandLayout{d, nb, p}, got.data());
        std::vector<double> sum(nb, 0.0);
        for (int c = 0; c < d; ++c) {
          const double r = static_cast<double>(x[c]) - static_cast<double>(xh[c]);
          sum[meter::BandOfDim(c, d, nb, p == RopePairing::kInterleaved)] += r * r;
        }
        for (int b = 0; b < nb; ++b) {
          const uint16_t want =
              meter::FloatToHalfUp(meter::RoundUpToFloat(std::sqrt(sum[b]) * (1.0 + 1e-12)));
          EXPECT_EQ(got[b], want) << "d " << d << " B " << nb << " band " << b;
        }
      }
    }
  }
}

TEST(Witness, RoundsUpNeverDown) {
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int it = 0; it < 2000; ++it) {
    std::vector<float> r(64);
    for (auto& x : r) x = g(rng) * std::exp2(static_cast<float>(it % 40 - 20));
    auto w = BandNorms(r, 8, RopePairing::kInterleaved);
    for (int b = 0; b < 8; ++b) {
      long double s = 0;
      for (int j = 8 * b; j < 8 * b + 8; ++j) s += static_cast<long double>(r[j]) * r[j];
      ASSERT_GE(static_cast<long double>(w[b]), std::sqrt(s));
    }
  }
}

TEST(Witness, PositionInvariantUnderMatchingPairing) {
  // fp32 rotation error ≤ ~4u per element; after fp16 round-up the band norms may differ by
  // one fp16 ulp: tolerance 2^-9 relative.
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (RopePairing pairing : {RopePairing::kInterleaved, RopePairing::kHalfSplit}) {
    for (int nb : {1, 4, 8, 32}) {
      std::vector<float> r(64);
      for (auto& x : r) x = g(rng);
      auto w0 = BandNorms(r, nb, pairing);
      for (int64_t pos : {1, 7, 100, 4095, 131071}) {
        auto w = BandNorms(Rotate(r, pos, pairing), nb, pairing);
        for (int b = 0; b < nb; ++b) EXPECT_NEAR(w[b], w0[b], w0[b] / 512) << pos << " " << b;
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
      std::vector<float> qz(d, 0.0f), wq(nb);
      std::vector<uint16_t> wb(nb);
      ComputeWitness(q.data(), qz.data(), BandLayout{d, nb, p}, wb.data());
      DecodeWitness(wb.data(), nb, wq.data());
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
