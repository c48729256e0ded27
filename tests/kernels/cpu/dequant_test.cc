// Dequantization vs an independent implementation (python-gguf fixtures, bit-exact), and
// the F16C half conversions vs the portable fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"

namespace witcert {
namespace {

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

struct Fixture {
  const char* name;
  GgmlType type;
};

class DequantFixtureTest : public ::testing::TestWithParam<Fixture> {};

TEST_P(DequantFixtureTest, MatchesPythonGgufBitExact) {
  const Fixture fx = GetParam();
  const std::string base = std::string("tests/kernels/cpu/fixtures/") + fx.name;
  const std::vector<uint8_t> raw = ReadFile(base + ".bin");
  const std::vector<uint8_t> want_bytes = ReadFile(base + ".f32");
  ASSERT_FALSE(raw.empty()) << base << ".bin missing (run tests from the repo root)";
  ASSERT_EQ(want_bytes.size() % 4, 0u);
  const int64_t count = static_cast<int64_t>(want_bytes.size() / 4);
  const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(fx.type));
  ASSERT_NE(info, nullptr);
  ASSERT_EQ(GgmlRowBytes(*info, count), raw.size());

  std::vector<float> got(count);  // [count]
  DequantizeValues(fx.type, raw.data(), count, got.data());
  for (int64_t i = 0; i < count; ++i) {
    uint32_t g, w;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&w, want_bytes.data() + 4 * i, 4);
    ASSERT_EQ(g, w) << fx.name << " element " << i << ": got " << got[i];
  }

  // DequantizeRow over a matrix view of the same bytes agrees row by row.
  const int64_t cols = static_cast<int64_t>(info->block_elems) *
                       (fx.type == GgmlType::kF16 || fx.type == GgmlType::kBF16 ? 64 : 1);
  if (count % cols == 0) {
    QuantMatrix m{fx.type, count / cols, cols, GgmlRowBytes(*info, cols), raw.data()};
    std::vector<float> row(cols);  // [cols]
    for (int64_t r = 0; r < m.rows; ++r) {
      DequantizeRow(m, r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), got.data() + r * cols, cols * 4), 0) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, DequantFixtureTest,
    ::testing::Values(Fixture{"q4_0", GgmlType::kQ4_0}, Fixture{"q4_1", GgmlType::kQ4_1},
                      Fixture{"q8_0", GgmlType::kQ8_0}, Fixture{"q4_k", GgmlType::kQ4_K},
                      Fixture{"q5_0", GgmlType::kQ5_0}, Fixture{"q5_1", GgmlType::kQ5_1},
                      Fixture{"iq4_nl", GgmlType::kIQ4_NL}, Fixture{"iq4_xs", GgmlType::kIQ4_XS},
                      Fixture{"q2_k", GgmlType::kQ2_K}, Fixture{"q3_k", GgmlType::kQ3_K},
                      Fixture{"q5_k", GgmlType::kQ5_K}, Fixture{"q6_k", GgmlType::kQ6_K},
                      Fixture{"f16", GgmlType::kF16},
                      Fixture{"bf16", GgmlType::kBF16}, Fixture{"model_q4_1", GgmlType::kQ4_1},
                      Fixture{"model_q8_0", GgmlType::kQ8_0}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(DequantTest, F32IsCopyAndUnsupportedIsNaN) {
  const float src[4] = {1.5f, -0.0f, 3e-40f, -7.25f};
  float out[4];
  DequantizeValues(GgmlType::kF32, reinterpret_cast<const uint8_t*>(src), 4, out);
  EXPECT_EQ(std::memcmp(src, out, sizeof(src)), 0);
  uint8_t block[36] = {};  // Q8_1: an activation format, never a weight here
  float q8_1[32];
  DequantizeValues(GgmlType::kQ8_1, block, 32, q8_1);
  for (float v : q8_1) EXPECT_TRUE(std::isnan(v));
}

TEST(HalfConversionTest, F16ToF32PortableMatchesHardwareForAllHalves) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = F16ToF32(static_cast<uint16_t>(h));
    const float b = F16ToF32Portable(static_cast<uint16_t>(h));
    if (std::isnan(a)) {
      EXPECT_TRUE(std::isnan(b)) << h;
      continue;
    }
    uint32_t ba, bb;
    std::memcpy(&ba, &a, 4);
    std::memcpy(&bb, &b, 4);
    ASSERT_EQ(ba, bb) << "half 0x" << std::hex << h;
  }
}

TEST(HalfConversionTest, F32ToF16PortableMatchesHardware) {
  std::mt19937 rng(7);
  std::vector<float> probes = {
      0.0f,    -0.0f,        65504.0f, 65519.996f,    65520.0f, 1e9f,
      -1e9f,   5.960464e-8f, 2.98e-8f, 2.9802322e-8f, 1e-10f,   6.1035156e-5f,
      6.1e-5f, 1.0f / 3.0f,  INFINITY, -INFINITY,     NAN};
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Bias toward the half range: exponents 100..145.
    u = (u & 0x807FFFFFu) | ((100u + (u >> 23) % 46u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    probes.push_back(f);
  }
  for (float f : probes) {
    const uint16_t a = F32ToF16(f);
    const uint16_t b = F32ToF16Portable(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(b)));
      continue;
    }
    ASSERT_EQ(a, b) << "float " << f;
  }
}

TEST(QuantBlocksTest, UnpackQ4KScalesUnpacksSixBitFields) {
  // Independent packing: sc/m j<4 in the low 6 bits of bytes j / j+4; j>=4 split into a
  // low nibble in byte j+4 and the top 2 bits of bytes j-4 / j.
  const uint8_t sc[8] = {1, 63, 17, 42, 5, 60, 33, 12};
  const uint8_t mn[8] = {62, 0, 31, 7, 44, 19, 2, 63};
  uint8_t packed[12] = {};
  for (int j = 0; j < 4; ++j) {
    packed[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
    packed[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
    packed[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
  }
  const Q4KScalesMins u = UnpackQ4KScales(packed);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(u.sc[j], sc[j]) << j;
    EXPECT_EQ(u.m[j], mn[j]) << j;
  }
}

}  // namespace
}  // namespace witcert
