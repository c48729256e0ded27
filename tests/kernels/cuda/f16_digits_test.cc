// The fp16 digit splits of the pipelined decode kernel's tensor-core paths (f16_digits.cuh),
// on the CPU: the error bounds their comments state, over ranges and edge cases.
#include "kernels/cuda/f16_digits.cuh"

#include <cmath>
#include <cstdint>
#include <random>

#include <gtest/gtest.h>

namespace witcert::cuda_kv {
namespace {

// hi + lo of a digit pair, in double (both halves exactly).
double DigitSum(uint32_t pair, float* hi_out = nullptr) {
  const float hi = __half2float(__ushort_as_half(static_cast<unsigned short>(pair & 0xffffu)));
  const float lo = __half2float(__ushort_as_half(static_cast<unsigned short>(pair >> 16)));
  if (hi_out != nullptr) *hi_out = hi;
  return static_cast<double>(hi) + static_cast<double>(lo);
}

TEST(F16DigitPair, MissesByAtMostTwoToTheMinus22RelativeOrTwoToTheMinus25) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  double worst_rel = 0.0;
  for (int i = 0; i < 400000; ++i) {
    // |x| from 2^-30 to just under 2^15: normal and subnormal low digits alike.
    const float x = std::ldexp(mant(rng), static_cast<int>(rng() % 46) - 30);
    float hi = 0.0f;
    const double sum = DigitSum(F16DigitPair(x), &hi);
    const double err = std::fabs(sum - static_cast<double>(x));
    EXPECT_LE(err, std::ldexp(std::fabs(static_cast<double>(x)), -22) + std::ldexp(1.0, -25)) << x;
    EXPECT_EQ(hi, __half2float(__float2half_rn(x))) << x;  // hi is fp16(x), in the low half
    if (std::fabs(x) >= 1.0f) worst_rel = std::max(worst_rel, err / std::fabs(static_cast<double>(x)));
  }
  EXPECT_GT(worst_rel, 0.0);  // the split is not exact in general: the bound is what holds
  EXPECT_LE(worst_rel, std::ldexp(1.0, -22));
  EXPECT_EQ(F16DigitPair(0.0f), 0u);
  EXPECT_EQ(DigitSum(F16DigitPair(-3.0f)), -3.0);
}

TEST(DigitFormat, Fp16WeightsInZeroOneMissByTwoToTheMinus22RelativeOrTwoToTheMinus40) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float edges[] = {0.0f, 1.0f, std::nextafter(1.0f, 0.0f), 0x1p-29f, 0x1p-40f, 0x1p-126f, 0x1p-149f, 0.5f};
  auto check = [](float w) {
    float hi = 0.0f;
    const double sum = DigitSum(DigitFormat<false>::Weight(w), &hi) / DigitFormat<false>::kWeightScale;
    EXPECT_LE(std::fabs(sum - static_cast<double>(w)), std::ldexp(static_cast<double>(w), -22) + std::ldexp(1.0, -40))
        << w;
    EXPECT_LE(hi, DigitFormat<false>::kWeightScale) << w;  // finite, inside fp16's range
  };
  for (float w : edges) check(w);
  for (int i = 0; i < 400000; ++i) check(std::ldexp(unit(rng), -static_cast<int>(rng() % 40)));
  EXPECT_EQ(DigitFormat<false>::Weight(1.0f) & 0xffffu, static_cast<uint32_t>(__half_as_ushort(__float2half_rn(32768.0f))));
}

TEST(Bf16DigitPair, MissesByAtMostTwoToTheMinus16Relative) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  double worst_rel = 0.0;
  for (int i = 0; i < 400000; ++i) {
    const float x = std::ldexp(mant(rng), static_cast<int>(rng() % 200) - 100);  // fp32's range
    const uint32_t pair = Bf16DigitPair(x);
    const float hi = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(pair & 0xffffu)));
    const float lo = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(pair >> 16)));
    const double err = std::fabs(static_cast<double>(hi) + static_cast<double>(lo) - static_cast<double>(x));
    EXPECT_LE(err, std::ldexp(std::fabs(static_cast<double>(x)), -16)) << x;
    EXPECT_EQ(hi, __bfloat162float(__float2bfloat16_rn(x))) << x;
    if (x != 0.0f) worst_rel = std::max(worst_rel, err / std::fabs(static_cast<double>(x)));
  }
  EXPECT_GT(worst_rel, std::ldexp(1.0, -24));  // not exact: the bound is what holds
}

// bf16's weights keep their relative precision down to 2^-118 (fp32's range, no scale; below,
// the low digit is subnormal), where fp16's split loses weights below 2^-40.
TEST(DigitFormat, Bf16WeightsMissByAtMostTwoToTheMinus16Relative) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int i = 0; i < 200000; ++i) {
    const float w = std::ldexp(0.5f + 0.5f * unit(rng), -static_cast<int>(rng() % 118));
    const uint32_t pair = DigitFormat<true>::Weight(w);
    const float hi = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(pair & 0xffffu)));
    const float lo = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(pair >> 16)));
    const double sum = (static_cast<double>(hi) + static_cast<double>(lo)) / DigitFormat<true>::kWeightScale;
    EXPECT_LE(std::fabs(sum - static_cast<double>(w)), std::ldexp(static_cast<double>(w), -16)) << w;
  }
}

}  // namespace
}  // namespace witcert::cuda_kv
