// The constants of kernels/cuda/tc_logit_eta.cuh re-derived from the model and the digit bounds
// (CPU only, runs in CI): a constant edited below what its derivation needs fails here, before
// any device sees it. The model itself is checked on the device by mma_rounding_model_test.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/cuda/tc_logit_eta.cuh"

namespace witcert {
namespace {

constexpr long double kU = 5.9604644775390625e-8L;  // 2^-24, fp32 round-to-nearest
constexpr int kD = 128;

// A chain of n MMAs errs by ≤ μ·Σ_j (|C_j| + T_j) with |C_j| ≤ (1+μ)^j·Σ_{i<j} T_i, so by
// ≤ μ·T·(1 + (n−1)(1+μ)^(n−1)): the factor the header writes as 4.01 (n = 4) and 8.02 (n = 8).
long double ChainFactor(int n) {
  return 1.0L + (n - 1) * std::pow(1.0L + static_cast<long double>(cuda_kv::kTcMu), n - 1);
}

struct DigitBound {
  long double rho, alpha, kmax;  // |x − hi − lo| ≤ ρ|x| + α; the largest finite key
};

template <bool BF16>
void CheckConstants(const DigitBound& db) {
  const long double mu = cuda_kv::kTcMu, nu = cuda_kv::kTcNu;
  const long double rel = (ChainFactor(4) * mu + 8 * kU + db.rho * (1 + 2 * db.rho)) *
                          (1 + ChainFactor(8) * mu + 2 * kU) * (1 + 4 * kU);
  const long double abs = kD * db.alpha * db.kmax * (1 + 2 * db.rho) + 24 * nu;
  EXPECT_GE(static_cast<long double>(cuda_kv::TcLogitEta<BF16>::kRel), rel);
  EXPECT_GE(static_cast<long double>(cuda_kv::TcLogitEta<BF16>::kAbs), abs);
  // Not needlessly loose either: within 2% of the relative need.
  EXPECT_LE(static_cast<long double>(cuda_kv::TcLogitEta<BF16>::kRel), rel * 1.02L);
}

TEST(TcLogitEta, ChainFactorsAreTheHeaders) {
  EXPECT_LE(ChainFactor(4), 4.01L);
  EXPECT_LE(ChainFactor(8), 8.02L);
}

TEST(TcLogitEta, Fp16ConstantsCoverTheirDerivation) {
  CheckConstants<false>({std::ldexp(1.0L, -22), std::ldexp(1.0L, -25), 65504.0L});
}

TEST(TcLogitEta, Bf16ConstantsCoverTheirDerivation) {
  const long double bf16_max = (2.0L - std::ldexp(1.0L, -7)) * std::ldexp(1.0L, 127);
  CheckConstants<true>({std::ldexp(1.0L, -16), std::ldexp(1.0L, -134), bf16_max});
}

TEST(TcLogitEta, MonotoneAndNeverSmallOnBadInput) {
  const float us = 0.01f;
  float prev = 0.0f;
  for (float t : {0.0f, 1e-30f, 1.0f, 1e3f, 1e10f, 1e30f}) {
    const float e = cuda_kv::TcLogitEtaOf<false>(t, us);
    EXPECT_GE(e, prev) << t;
    EXPECT_GE(static_cast<double>(e), (6.25e-5 * t + 0.25) * us) << t;  // never below the real-number formula
    prev = e;
  }
  EXPECT_TRUE(std::isinf(cuda_kv::TcLogitEtaOf<true>(std::numeric_limits<float>::infinity(), us)));
  EXPECT_TRUE(std::isnan(cuda_kv::TcLogitEtaOf<false>(std::nanf(""), us)));
}

}  // namespace
}  // namespace witcert
