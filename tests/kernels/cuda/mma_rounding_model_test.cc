// The tensor-core rounding model that the metered fp16 / bf16 logits' η rests on
// (kernels/cuda/tc_logit_eta.cuh), checked on the device:
//  * OneMmaWithinTheModel: one mma.m16n8k16 per tile errs, per element, by at most
//    μ·(|C| + Σ|a·b|) + ν against the exact sum, on adversarial tiles (the full exponent range,
//    subnormals, cancellation to near zero, one term dominating, alternating signs). Prints the
//    largest error seen in units of 2^-23 of the absolute sum, i.e. the model's margin here.
//  * LogitWithinEta: the decode kernel's logit arithmetic (query digits, two chains of four
//    MMAs, T̂'s chain of eight with sign bits cleared, the same fp32 combination) against the
//    long-double dot q·k/√d, per token: |ℓ̂ − q·k/√d| ≤ TcLogitEtaOf(T̂, unscale).
// The exact references are long double: products of 16-bit formats are exact there, and the
// sums' own error (≤ 130·2^-64 of the absolute sum) is far below what either check allows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gtest/gtest.h"
#include "kernels/cuda/f16_digits.cuh"
#include "kernels/cuda/tc_logit_eta.cuh"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/mma_rounding_cuda.h"

namespace witcert {
namespace {

long double Decode16(uint16_t bits, bool bf16) {
  if (bf16) {
    uint32_t w = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
  }
  __half_raw r;
  r.x = bits;
  return static_cast<long double>(__half2float(__half(r)));
}

// A random 16-bit value with exponent field in [emin, emax] (0 = subnormal for fp16) and
// random sign and mantissa.
uint16_t Random16(std::mt19937_64& rng, bool bf16, int emin, int emax) {
  const uint32_t e = static_cast<uint32_t>(std::uniform_int_distribution<int>(emin, emax)(rng));
  const uint32_t s = static_cast<uint32_t>(rng() & 1);
  if (bf16) return static_cast<uint16_t>((s << 15) | (e << 7) | (rng() & 0x7f));
  return static_cast<uint16_t>((s << 15) | (e << 10) | (rng() & 0x3ff));
}

uint16_t To16(long double x, bool bf16) {
  if (bf16) return __bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(x)));
  return __half_as_ushort(__float2half_rn(static_cast<float>(x)));
}

// Fills tile `i` of a [16×16], b [16×8], c [16×8] with pattern i % 6.
void FillTile(std::mt19937_64& rng, bool bf16, int64_t i, uint16_t* a, uint16_t* b, float* c) {
  // Exponent fields: fp16 [0, 30] (0: subnormal); bf16 [57, 187] (2^-70 .. 2^60), so products
  // reach below fp32's normal range (2^-140) but no sum overflows.
  const int lo = bf16 ? 57 : 0, hi = bf16 ? 187 : 30;
  const int pattern = static_cast<int>(i % 6);
  for (int j = 0; j < 256; ++j) a[j] = Random16(rng, bf16, lo, hi);
  for (int j = 0; j < 128; ++j) b[j] = Random16(rng, bf16, lo, hi);
  for (int j = 0; j < 128; ++j) c[j] = 0.0f;
  switch (pattern) {
    case 0:  // the full range, C = 0
      break;
    case 1: {  // narrow exponents (terms alike) and C = −fl(Σ a·b): the result cancels to ~0
      const int mid = bf16 ? 127 : 15;
      for (int j = 0; j < 256; ++j) a[j] = Random16(rng, bf16, mid - 3, mid + 3);
      for (int j = 0; j < 128; ++j) b[j] = Random16(rng, bf16, mid - 3, mid + 3);
      for (int r = 0; r < 16; ++r) {
        for (int n = 0; n < 8; ++n) {
          long double s = 0.0L;
          for (int k = 0; k < 16; ++k) s += Decode16(a[r * 16 + k], bf16) * Decode16(b[k * 8 + n], bf16);
          c[r * 8 + n] = -static_cast<float>(s);
        }
      }
      break;
    }
    case 2: {  // one large product per row, the rest tiny: alignment shifts them out
      const int big = bf16 ? 150 : 25, small = bf16 ? 100 : 5;
      for (int j = 0; j < 256; ++j) a[j] = Random16(rng, bf16, small - 3, small);
      for (int r = 0; r < 16; ++r) a[r * 16 + (r % 16)] = Random16(rng, bf16, big, big + 3);
      for (int j = 0; j < 128; ++j) b[j] = Random16(rng, bf16, small + 5, big);
      break;
    }
    case 3: {  // equal magnitudes, alternating signs, a large C of either sign
      const uint16_t one = bf16 ? 0x3f80 : 0x3c00;
      for (int j = 0; j < 256; ++j) a[j] = static_cast<uint16_t>(one | (rng() & (bf16 ? 0x7f : 0x3ff)) | ((j & 1) << 15));
      for (int j = 0; j < 128; ++j) b[j] = static_cast<uint16_t>(one | (rng() & (bf16 ? 0x7f : 0x3ff)));
      for (int j = 0; j < 128; ++j) c[j] = std::ldexp(1.0f + (rng() & 0xffff) / 65536.0f, 10 + static_cast<int>(rng() % 12)) * ((rng() & 1) ? 1.0f : -1.0f);
      break;
    }
    case 4: {  // small inputs: fp16 subnormals on both sides, bf16 products below 2^-126
      for (int j = 0; j < 256; ++j) a[j] = Random16(rng, bf16, bf16 ? 57 : 0, bf16 ? 70 : 2);
      for (int j = 0; j < 128; ++j) b[j] = Random16(rng, bf16, bf16 ? 57 : 0, bf16 ? 70 : 8);
      break;
    }
    case 5: {  // random C against random products of the full range
      for (int j = 0; j < 128; ++j) {
        c[j] = static_cast<float>(Decode16(Random16(rng, bf16, lo, hi), bf16)) *
               static_cast<float>(Decode16(Random16(rng, bf16, (lo + hi) / 2, hi), bf16));
      }
      break;
    }
  }
}

class MmaRoundingModel : public ::testing::TestWithParam<bool> {};

TEST_P(MmaRoundingModel, OneMmaWithinTheModel) {
  WITCERT_SKIP_WITHOUT_GPU();
  const bool bf16 = GetParam();
  constexpr int64_t kTiles = 6 * 4000;
  std::mt19937_64 rng(bf16 ? 17 : 16);
  std::vector<uint16_t> a(kTiles * 256), b(kTiles * 128);
  std::vector<float> c(kTiles * 128), d;
  for (int64_t i = 0; i < kTiles; ++i) FillTile(rng, bf16, i, &a[i * 256], &b[i * 128], &c[i * 128]);
  ASSERT_CUDA_OK(testing::MmaTilesCuda(bf16, a, b, c, kTiles, &d));
  const long double mu = cuda_kv::kTcMu, nu = cuda_kv::kTcNu;
  long double worst[6] = {0, 0, 0, 0, 0, 0};  // max (|D − exact| − ν) / (|C| + Σ|a·b|) per pattern
  int failures = 0;
  for (int64_t i = 0; i < kTiles; ++i) {
    for (int r = 0; r < 16; ++r) {
      for (int n = 0; n < 8; ++n) {
        long double s = c[i * 128 + r * 8 + n], abs_sum = std::fabs(s);
        for (int k = 0; k < 16; ++k) {
          const long double t = Decode16(a[i * 256 + r * 16 + k], bf16) * Decode16(b[i * 128 + k * 8 + n], bf16);
          s += t;
          abs_sum += std::fabs(t);
        }
        const long double got = d[i * 128 + r * 8 + n];
        const long double err = std::fabs(got - s);
        if (!(err <= mu * abs_sum + nu) && ++failures <= 5) {
          ADD_FAILURE() << "tile " << i << " (pattern " << i % 6 << ") row " << r << " col " << n << ": got "
                        << static_cast<double>(got) << " exact " << static_cast<double>(s) << " |terms| "
                        << static_cast<double>(abs_sum);
        }
        if (abs_sum > 0) worst[i % 6] = std::max(worst[i % 6], (err - nu > 0 ? err - nu : 0) / abs_sum);
      }
    }
  }
  EXPECT_EQ(failures, 0);
  long double all = 0;
  for (long double w : worst) all = std::max(all, w);
  std::printf("%s mma.m16n8k16: largest error per pattern, in units of 2^-23 of |C| + Σ|a·b|:", bf16 ? "bf16" : "fp16");
  for (long double w : worst) std::printf(" %.3f", static_cast<double>(w * 8388608.0L));
  std::printf("; the model allows %.1f (margin %.1fx)\n", static_cast<double>(mu * 8388608.0L),
              static_cast<double>(all > 0 ? mu / all : INFINITY));
  RecordProperty("worst_ulps_2m23", std::to_string(static_cast<double>(all * 8388608.0L)));
  // Products are exact: were they rounded (or the sum kept fewer than ~20 bits), the worst
  // case above would sit near μ; it must stay well inside it for the model's stated margin.
  EXPECT_LT(all, mu / 4) << "the device's accumulation is closer to the model's limit than documented";
}

// The kernel's logit path on chained tiles: 16 tokens × 4 heads per tile.
TEST_P(MmaRoundingModel, LogitWithinEta) {
  WITCERT_SKIP_WITHOUT_GPU();
  const bool bf16 = GetParam();
  constexpr int kD = 128, kTok = 16, kHeads = 4;
  constexpr int64_t kTiles = 600;
  std::mt19937_64 rng(bf16 ? 29 : 28);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(kTiles * kHeads * kD);
  std::vector<uint16_t> k(kTiles * kTok * kD);
  for (int64_t i = 0; i < kTiles; ++i) {
    const int pattern = static_cast<int>(i % 4);
    float* qt = &q[i * kHeads * kD];
    uint16_t* kt = &k[i * kTok * kD];
    for (int j = 0; j < kHeads * kD; ++j) qt[j] = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
    for (int j = 0; j < kTok * kD; ++j) kt[j] = To16(normal(rng) * 2.0f, bf16);
    if (pattern == 1) {  // outlier channels on both sides, keys over the full range
      for (int h = 0; h < kHeads; ++h) qt[h * kD + (h * 37) % kD] *= 4096.0f;
      for (int j = 0; j < kTok * kD; ++j) kt[j] = Random16(rng, bf16, bf16 ? 90 : 0, bf16 ? 150 : 28);
    } else if (pattern == 2) {  // tiny queries (the digits' scale far from 1), tiny query channels
      for (int j = 0; j < kHeads * kD; ++j) qt[j] *= (j % 3 == 0) ? 1e-7f : 1e-3f;
    }
    if (pattern == 3) {  // each token's dot with head 0 cancels to near zero
      qt[0] = 8.0f;
      for (int t = 0; t < kTok; ++t) {
        long double s = 0.0L;
        for (int c = 1; c < kD; ++c) s += static_cast<long double>(qt[c]) * Decode16(kt[t * kD + c], bf16);
        kt[t * kD] = To16(-s / qt[0], bf16);
      }
    }
  }
  // Digits as the kernel forms them (metered_decode_pipelined.cuh, kTcK): per head, x = q·2^s with
  // max|x| < 2^14; column 2h holds hi digits, 2h + 1 lo digits.
  std::vector<uint16_t> b(kTiles * kD * 8), babs(kTiles * kD * 8);
  std::vector<float> unscale(kTiles * kHeads);
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(kD));
  for (int64_t i = 0; i < kTiles; ++i) {
    for (int h = 0; h < kHeads; ++h) {
      const float* qh = &q[(i * kHeads + h) * kD];
      float amax = 0.0f;
      for (int c = 0; c < kD; ++c) amax = std::max(amax, std::fabs(qh[c]));
      int e = 0;
      if (amax > 0.0f) std::frexp(amax, &e);
      e = std::max(e, -100);
      const float scale = std::ldexp(1.0f, 14 - e);
      unscale[i * kHeads + h] = (1.0f / scale) * inv_sqrt_d;
      for (int c = 0; c < kD; ++c) {
        const uint32_t pair = bf16 ? cuda_kv::DigitFormat<true>::Pair(qh[c] * scale) : cuda_kv::DigitFormat<false>::Pair(qh[c] * scale);
        b[(i * kD + c) * 8 + 2 * h] = static_cast<uint16_t>(pair);
        b[(i * kD + c) * 8 + 2 * h + 1] = static_cast<uint16_t>(pair >> 16);
        babs[(i * kD + c) * 8 + 2 * h] = static_cast<uint16_t>(pair & 0x7fff);
        babs[(i * kD + c) * 8 + 2 * h + 1] = static_cast<uint16_t>((pair >> 16) & 0x7fff);
      }
    }
  }
  // k-step ks: A = the tokens' channels [16ks, 16ks + 16), B = those rows of the digits.
  auto step = [&](const std::vector<uint16_t>& bsrc, bool magnitude, int ks, const std::vector<float>& cin,
                  std::vector<float>* out) {
    std::vector<uint16_t> a(kTiles * 256), bt(kTiles * 128);
    for (int64_t i = 0; i < kTiles; ++i) {
      for (int r = 0; r < 16; ++r) {
        for (int kk = 0; kk < 16; ++kk) {
          const uint16_t v = k[(i * kTok + r) * kD + 16 * ks + kk];
          a[i * 256 + r * 16 + kk] = magnitude ? static_cast<uint16_t>(v & 0x7fff) : v;
        }
      }
      for (int kk = 0; kk < 16; ++kk) {
        for (int n = 0; n < 8; ++n) bt[i * 128 + kk * 8 + n] = bsrc[(i * kD + 16 * ks + kk) * 8 + n];
      }
    }
    ASSERT_CUDA_OK(testing::MmaTilesCuda(bf16, a, bt, cin, kTiles, out));
  };
  const std::vector<float> zero(kTiles * 128, 0.0f);
  std::vector<float> ca = zero, cb = zero, ct = zero, next;
  for (int ks = 0; ks < 8; ++ks) {
    step(b, false, ks, (ks & 1) ? cb : ca, &next);
    ((ks & 1) ? cb : ca) = next;
    step(babs, true, ks, ct, &next);
    ct = next;
  }
  double worst = 0.0;  // max |ℓ̂ − exact| / η
  int failures = 0;
  for (int64_t i = 0; i < kTiles; ++i) {
    for (int t = 0; t < kTok; ++t) {
      for (int h = 0; h < kHeads; ++h) {
        const int64_t o = i * 128 + t * 8 + 2 * h;
        const float us = unscale[i * kHeads + h];
        const float l = ((ca[o] + cb[o]) + (ca[o + 1] + cb[o + 1])) * us;  // the kernel's combination
        const float that = ct[o] + ct[o + 1];
        const float eta = bf16 ? cuda_kv::TcLogitEtaOf<true>(that, us) : cuda_kv::TcLogitEtaOf<false>(that, us);
        long double exact = 0.0L;
        for (int c = 0; c < kD; ++c) exact += static_cast<long double>(q[(i * kHeads + h) * kD + c]) * Decode16(k[(i * kTok + t) * kD + c], bf16);
        exact /= std::sqrt(static_cast<long double>(kD));
        const long double err = std::fabs(static_cast<long double>(l) - exact);
        if (!(err <= eta) && ++failures <= 5) {
          ADD_FAILURE() << "tile " << i << " token " << t << " head " << h << ": logit " << l << " exact "
                        << static_cast<double>(exact) << " η " << eta;
        }
        if (eta > 0) worst = std::max(worst, static_cast<double>(err / eta));
      }
    }
  }
  EXPECT_EQ(failures, 0);
  std::printf("%s logits: largest |ℓ̂ − q·k/√d| / η = %.3g\n", bf16 ? "bf16" : "fp16", worst);
}

INSTANTIATE_TEST_SUITE_P(Formats, MmaRoundingModel, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Bf16" : "Fp16"; });

}  // namespace
}  // namespace witcert
