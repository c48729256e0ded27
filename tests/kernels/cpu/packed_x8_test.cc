// The row-interleaved path (packed_x8.h) against the plain-row kernels.
//
// The packed kernels promise the plain scalar kernels' exact op sequence, so every
// comparison here is bit for bit: packed Matmul (the AVX2 kernel) vs Matmul on the plain rows
// with the scalar variant forced, over row counts that are and are not multiples of 8,
// activation tiles of every width, several matrices in one MatmulMany, 1 and 2 threads, and
// weights and activations that push the int16 sums to their largest value. The scalar kernels are
// in turn checked against the double reference in matmul_test.cc.
#include "kernels/cpu/packed_x8.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/quant_blocks.h"

namespace witcert {
namespace {

namespace mi = matmul_internal;

struct PackedMatrix {
  std::vector<uint8_t> bytes;   // [rows, row_bytes]
  std::vector<uint8_t> packed;  // [PackedX8Bytes]
  QuantMatrix plain, packed_view;
};

// Random codes (Q8_0: including -128) with random fp16 scales (and mins), or, with
// `saturate`, the codes of largest magnitude (nibble 15; Q8_0: -128).
PackedMatrix MakeMatrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng,
                        bool saturate) {
  const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  const size_t row_bytes = GgmlRowBytes(*info, cols);
  PackedMatrix m;
  m.bytes.resize(row_bytes * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  const uint8_t extreme = type == GgmlType::kQ8_0 ? 0x80 : 0xFF;
  for (uint8_t& b : m.bytes) b = saturate ? extreme : static_cast<uint8_t>(byte(rng));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (size_t off = 0; off < m.bytes.size(); off += info->block_bytes) {
    const uint16_t d = F32ToF16(0.02f * nd(rng));
    std::memcpy(&m.bytes[off], &d, 2);
    if (type == GgmlType::kQ4_1) {
      const uint16_t mn = F32ToF16(0.1f * nd(rng));
      std::memcpy(&m.bytes[off + 2], &mn, 2);
    }
  }
  m.plain = QuantMatrix{type, rows, cols, row_bytes, m.bytes.data()};
  EXPECT_TRUE(PackableX8(m.plain));
  m.packed.resize(PackedX8Bytes(type, rows, cols));
  PackX8(m.plain, m.packed.data());
  m.packed_view = m.plain;
  m.packed_view.packed_x8 = m.packed.data();
  return m;
}

std::vector<float> Activations(int64_t n, int64_t cols, std::mt19937& rng, bool saturate) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n * cols);  // [n, cols]
  for (float& v : x) v = saturate ? 3.0f : nd(rng);
  if (!saturate && x.size() > 7) x[7] = -50.0f;  // an outlier: its block's other codes shrink
  return x;
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    ASSERT_EQ(ua, ub) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

// y = x · Wᵀ through the plain rows with the scalar kernel forced.
std::vector<float> ScalarMatmul(const std::vector<float>& x, int64_t n, const QuantMatrix& w) {
  std::vector<float> y(n * w.rows);  // [n, rows]
  mi::SetCpuKernelOverride(mi::CpuKernel::kScalar);
  Matmul(x.data(), n, w, y.data(), nullptr);
  mi::ClearCpuKernelOverride();
  return y;
}

class PackedX8Test : public ::testing::TestWithParam<GgmlType> {
 protected:
  void SetUp() override {
    if (mi::DotPackedX8Avx2() == nullptr || !mi::CpuKernelAvailable(mi::CpuKernel::kAvx2)) {
      GTEST_SKIP() << "no AVX2 on this machine or build";
    }
  }
};

// Every packed build this CPU runs (AVX2, and the VNNI ones where present), selected the way
// Matmul selects it.
TEST_P(PackedX8Test, MatchesScalarKernelBitForBit) {
  int variants = 0;
  using mi::CpuKernel;
  const std::pair<CpuKernel, mi::PackedDotFn> builds[] = {
      {CpuKernel::kAvx2, mi::DotPackedX8Avx2()},
      {CpuKernel::kAvxVnni, mi::DotPackedX8AvxVnni()},
      {CpuKernel::kAvx512Vnni, mi::DotPackedX8Avx512Vnni()}};
  for (const auto& [k, build] : builds) {
    // A variant whose packed build is absent would run the AVX2 one under its name.
    if (build == nullptr || !mi::CpuKernelAvailable(k)) continue;
    ++variants;
    SCOPED_TRACE(mi::CpuKernelName(k));
    std::mt19937 rng(11);
    ThreadPool pool(2);
    for (int64_t rows : {8, 37, 64, 203}) {
      for (int64_t cols : {32, 96, 576}) {
        const PackedMatrix m = MakeMatrix(GetParam(), rows, cols, rng, false);
        for (int64_t n : {1, 2, 3, 4, 5, 9, 16, 17}) {
          const std::vector<float> x = Activations(n, cols, rng, false);
          const std::vector<float> want = ScalarMatmul(x, n, m.plain);
          mi::SetCpuKernelOverride(k);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> got(n * rows, -1.0f);
            Matmul(x.data(), n, m.packed_view, got.data(), p);
            ExpectSameBits(got, want, "packed vs scalar");
          }
          mi::ClearCpuKernelOverride();
        }
      }
    }
  }
  EXPECT_GE(variants, 1);
}

// The VNNI builds are the AVX2 build's bits on the extremes of the codes too: the weights at
// their largest magnitude (nibble 15; Q8_0 −128) against activation codes of ±127.
TEST_P(PackedX8Test, VnniBuildsMatchAvx2OnExtremeCodes) {
  const std::pair<mi::CpuKernel, mi::PackedDotFn> builds[] = {
      {mi::CpuKernel::kAvxVnni, mi::DotPackedX8AvxVnni()},
      {mi::CpuKernel::kAvx512Vnni, mi::DotPackedX8Avx512Vnni()}};
  std::mt19937 rng(3);
  const int64_t cols = 128;
  const PackedMatrix m = MakeMatrix(GetParam(), 16, cols, rng, true);
  std::vector<float> x(8 * cols);  // [8, cols]: ±3 in every block, so codes ±127
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i * 7 + i / cols) % 3 == 0 ? -3.0f : 3.0f;
  std::vector<uint8_t> act(8 * mi::Q8_1RowBytes(cols));
  for (int j = 0; j < 8; ++j)
    mi::QuantizeRowQ8_1(x.data() + j * cols, cols, act.data() + j * mi::Q8_1RowBytes(cols));
  const size_t group_bytes = (cols / 32) * PackedX8BlockBytes(GetParam());
  int ran = 0;
  for (const auto& [kernel, dot] : builds) {
    if (dot == nullptr || !mi::CpuKernelAvailable(kernel)) continue;
    ++ran;
    SCOPED_TRACE(mi::CpuKernelName(kernel));
    for (int g = 0; g < 2; ++g) {
      for (int nx = 1; nx <= mi::kPackedMaxTile; ++nx) {
        std::vector<float> want(nx * kPackRows), got(nx * kPackRows, -1.0f);
        const uint8_t* group = m.packed.data() + g * group_bytes;
        const size_t stride = mi::Q8_1RowBytes(cols);
        mi::DotPackedX8Avx2()(group, act.data(), stride, nx, cols, GetParam(), want.data());
        dot(group, act.data(), stride, nx, cols, GetParam(), got.data());
        ExpectSameBits(got, want, "vnni vs avx2");
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no VNNI build runs on this CPU";
}

TEST_P(PackedX8Test, ScalarPackedDotMatchesPlainScalarDot) {
  std::mt19937 rng(5);
  const int64_t cols = 160;
  const PackedMatrix m = MakeMatrix(GetParam(), 13, cols, rng, false);  // groups of 8 + 5 (3 padded)
  const std::vector<float> x = Activations(3, cols, rng, false);
  std::vector<uint8_t> act(3 * mi::Q8_1RowBytes(cols));
  for (int j = 0; j < 3; ++j)
    mi::QuantizeRowQ8_1(x.data() + j * cols, cols, act.data() + j * mi::Q8_1RowBytes(cols));
  const GgmlType type = GetParam();
  const size_t group_bytes = (cols / 32) * PackedX8BlockBytes(type);
  for (int g = 0; g < 2; ++g) {
    float packed_out[3 * kPackRows];
    mi::DotPackedX8Scalar(m.packed.data() + g * group_bytes, act.data(), mi::Q8_1RowBytes(cols),
                          3, cols, type, packed_out);
    for (int r = 0; r < kPackRows; ++r) {
      const int64_t row = g * kPackRows + r;
      float plain[3];
      if (row >= m.plain.rows) {  // padding rows read as zero weights
        for (int j = 0; j < 3; ++j) EXPECT_EQ(packed_out[kPackRows * j + r], 0.0f);
        continue;
      }
      const mi::RowDotFn plain_dot = type == GgmlType::kQ8_0   ? mi::DotQ8_0Scalar
                                     : type == GgmlType::kQ4_0 ? mi::DotQ4_0Scalar
                                                               : mi::DotQ4_1Scalar;
      plain_dot(m.plain.row(row), act.data(), mi::Q8_1RowBytes(cols), 3, cols, plain);
      for (int j = 0; j < 3; ++j) EXPECT_EQ(packed_out[kPackRows * j + r], plain[j]) << row;
    }
  }
}

// The largest codes against activation codes 127: a Q4 int16 lane sums 8 pairs of 15·127
// (30480), a Q8_0 maddubs lane is 2·128·127 (32512), the largest each kernel can see.
// Saturation would show as a different result.
TEST_P(PackedX8Test, LargestBlockSumsDoNotSaturate) {
  std::mt19937 rng(3);
  const PackedMatrix m = MakeMatrix(GetParam(), 16, 256, rng, true);
  const std::vector<float> x = Activations(4, 256, rng, true);
  std::vector<float> got(4 * 16);
  Matmul(x.data(), 4, m.packed_view, got.data(), nullptr);
  ExpectSameBits(got, ScalarMatmul(x, 4, m.plain), "saturated");
}

// Q, K and V through one MatmulMany: groups stacked across matrices of different heights.
TEST_P(PackedX8Test, ManyMatricesMatchSeparateScalarCalls) {
  std::mt19937 rng(8);
  ThreadPool pool(2);
  const int64_t cols = 192;
  const PackedMatrix a = MakeMatrix(GetParam(), 40, cols, rng, false);
  const PackedMatrix b = MakeMatrix(GetParam(), 13, cols, rng, false);
  const PackedMatrix c = MakeMatrix(GetParam(), 24, cols, rng, false);
  for (int64_t n : {1, 6}) {
    const std::vector<float> x = Activations(n, cols, rng, false);
    std::vector<float> ya(n * 40), yb(n * 13), yc(n * 24);
    const QuantMatrix* ws[] = {&a.packed_view, &b.packed_view, &c.packed_view};
    float* ys[] = {ya.data(), yb.data(), yc.data()};
    MatmulMany(x.data(), n, ws, ys, 3, &pool);
    ExpectSameBits(ya, ScalarMatmul(x, n, a.plain), "a");
    ExpectSameBits(yb, ScalarMatmul(x, n, b.plain), "b");
    ExpectSameBits(yc, ScalarMatmul(x, n, c.plain), "c");
  }
}

// A token's outputs do not depend on how many activation rows share the call.
TEST_P(PackedX8Test, BatchInvariant) {
  std::mt19937 rng(2);
  const int64_t cols = 576, rows = 72, n = 11;
  const PackedMatrix m = MakeMatrix(GetParam(), rows, cols, rng, false);
  const std::vector<float> x = Activations(n, cols, rng, false);
  std::vector<float> all(n * rows);
  Matmul(x.data(), n, m.packed_view, all.data(), nullptr);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> one(rows);
    Matmul(x.data() + i * cols, 1, m.packed_view, one.data(), nullptr);
    ExpectSameBits(one, std::vector<float>(all.begin() + i * rows, all.begin() + (i + 1) * rows),
                   "row alone vs in a batch");
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, PackedX8Test,
                         ::testing::Values(GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0),
                         [](const auto& info) {
                           return std::string(GetGgmlTypeInfo(static_cast<uint32_t>(info.param))->name);
                         });

}  // namespace
}  // namespace witcert
