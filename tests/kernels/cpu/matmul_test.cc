// Matmul (integer/FMA kernels, tiled, threaded) vs MatmulReference (dequantize + double).
//
// Tolerances, per output element y[i, r]:
//  * fp32 arithmetic: the kernels add at most cols/8 + 64 terms per accumulator chain, each
//    addition off by ≤ 2^-24 of a partial sum bounded by Σ_c |x_c|·M_r, where M_r = 4·max|w_r|
//    bounds the unrounded scale/min products (|d·sc·q| + |dmin·m| ≤ 3·max|w| in a block).
//    We allow twice that: tol_fp = (cols/8 + 64)·2^-23·Σ|x|·M_r.
//  * activation int8 rounding (quantized formats only): each x_c moves by ≤ d_b/2 =
//    max_{c∈b}|x_c|/254, so |Δy| ≤ Σ_b (max_b|x|/254)·Σ_{c∈b}|w_c| (times 1.001 for the
//    rounding of d itself).
// The tight check compares against the reference run on the *dequantized int8 activations*,
// so only tol_fp applies there; a wrong nibble order or scale shows up as O(1/sqrt(cols))
// relative error, far above tol_fp (≤ 6e-4 relative at cols = 4096).
// The SIMD variants (AVX2, AVX-VNNI, AVX512-VNNI) are compared with each other bit for bit:
// their integer dots are exact and their fp32 op order is the same by design.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/parallel.h"

namespace witcert {
namespace {

namespace mi = matmul_internal;

struct OwnedMatrix {
  std::vector<uint8_t> bytes;  // [rows, row_bytes]
  QuantMatrix view;
};

uint16_t RandomHalf(std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  return F32ToF16(nd(rng));
}

// Random bit patterns for every quantized field, with sane fp16 scales.
OwnedMatrix RandomMatrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  OwnedMatrix m;
  const size_t row_bytes = GgmlRowBytes(*info, cols);
  m.bytes.resize(row_bytes * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
  const int64_t nblocks = static_cast<int64_t>(m.bytes.size() / info->block_bytes);
  uint8_t* p = m.bytes.data();
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t b = 0; b < nblocks; ++b, p += info->block_bytes) {
    switch (type) {
      case GgmlType::kQ4_0:
        reinterpret_cast<BlockQ4_0*>(p)->d = RandomHalf(rng, 0.02f);
        break;
      case GgmlType::kQ4_1: {
        auto* blk = reinterpret_cast<BlockQ4_1*>(p);
        blk->d = RandomHalf(rng, 0.02f);
        blk->m = RandomHalf(rng, 0.1f);
        break;
      }
      case GgmlType::kQ8_0:
        reinterpret_cast<BlockQ8_0*>(p)->d = RandomHalf(rng, 0.002f);
        break;
      case GgmlType::kQ5_0:
        reinterpret_cast<BlockQ5_0*>(p)->d = RandomHalf(rng, 0.01f);
        break;
      case GgmlType::kIQ4_NL:
        reinterpret_cast<BlockIQ4_NL*>(p)->d = RandomHalf(rng, 0.001f);
        break;
      case GgmlType::kIQ4_XS:
        reinterpret_cast<BlockIQ4_XS*>(p)->d = RandomHalf(rng, 0.00005f);
        break;
      case GgmlType::kQ5_1: {
        auto* blk = reinterpret_cast<BlockQ5_1*>(p);
        blk->d = RandomHalf(rng, 0.01f);
        blk->m = RandomHalf(rng, 0.1f);
        break;
      }
      case GgmlType::kQ4_K: {
        auto* blk = reinterpret_cast<BlockQ4_K*>(p);
        blk->d = RandomHalf(rng, 0.002f);
        blk->dmin = RandomHalf(rng, 0.002f);
        break;
      }
      case GgmlType::kQ2_K: {
        auto* blk = reinterpret_cast<BlockQ2_K*>(p);
        blk->d = RandomHalf(rng, 0.005f);
        blk->dmin = RandomHalf(rng, 0.002f);
        break;
      }
      case GgmlType::kQ3_K:
        reinterpret_cast<BlockQ3_K*>(p)->d = RandomHalf(rng, 0.0005f);
        break;
      case GgmlType::kQ5_K: {
        auto* blk = reinterpret_cast<BlockQ5_K*>(p);
        blk->d = RandomHalf(rng, 0.001f);
        blk->dmin = RandomHalf(rng, 0.002f);
        break;
      }
      case GgmlType::kQ6_K:
        reinterpret_cast<BlockQ6_K*>(p)->d = RandomHalf(rng, 0.0005f);
        break;
      case GgmlType::kF32: {
        const float v = nd(rng) * 0.1f;
        std::memcpy(p, &v, 4);
        break;
      }
      case GgmlType::kF16: {
        const uint16_t h = RandomHalf(rng, 0.1f);
        std::memcpy(p, &h, 2);
        break;
      }
      case GgmlType::kBF16: {
        const float v = nd(rng) * 0.1f;
        uint32_t u;
        std::memcpy(&u, &v, 4);
        const uint16_t h = static_cast<uint16_t>(u >> 16);
        std::memcpy(p, &h, 2);
        break;
      }
      default:
        break;
    }
  }
  m.view = QuantMatrix{type, rows, cols, row_bytes, m.bytes.data()};
  return m;
}

std::vector<float> RandomActivations(int64_t n, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n * cols);  // [n, cols]
  for (float& v : x) v = nd(rng);
  x[0] = 0.0f;  // exercise zeros and a large outlier
  if (x.size() > 5) x[5] = 40.0f;
  return x;
}

int64_t ActBlock(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kIQ4_NL:
      return 32;
    case GgmlType::kIQ4_XS:
      return 256;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return 256;
    default:
      return 0;  // fp32 activations
  }
}

// The activations the integer kernels actually see: quantize, then dequantize in fp32.
std::vector<float> QuantizedActivations(GgmlType t, const std::vector<float>& x, int64_t n,
                                        int64_t cols) {
  std::vector<float> out(x);  // [n, cols]
  const int64_t blk = ActBlock(t);
  if (blk == 32) {
    std::vector<uint8_t> q(mi::Q8_1RowBytes(cols));
    uint8_t* row = q.data();
    for (int64_t i = 0; i < n; ++i) {
      mi::QuantizeRowQ8_1(x.data() + i * cols, cols, row);
      const mi::Q8_1Row v = mi::ViewQ8_1Row(row, cols);
      for (int64_t c = 0; c < cols; ++c) out[i * cols + c] = v.d[c / 32] * v.qs[c];
    }
  } else if (blk == 256) {
    std::vector<mi::BlockQ8_Kx> q(cols / 256);
    for (int64_t i = 0; i < n; ++i) {
      mi::QuantizeRowQ8_K(x.data() + i * cols, cols, q.data());
      for (int64_t c = 0; c < cols; ++c) {
        out[i * cols + c] = q[c / 256].d * q[c / 256].qs[c % 256];
      }
    }
  }
  return out;
}

struct Tolerances {
  std::vector<double> fp;     // [n, rows]
  std::vector<double> quant;  // [n, rows]
};

Tolerances ComputeTolerances(GgmlType t, const QuantMatrix& w, const std::vector<float>& x,
                             int64_t n) {
  const int64_t rows = w.rows, cols = w.cols, blk = ActBlock(t);
  Tolerances tol{std::vector<double>(n * rows), std::vector<double>(n * rows, 0.0)};
  std::vector<float> wr(cols);  // [cols]
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(w, r, wr.data());
    double wmax = 0.0;
    for (float v : wr) wmax = std::fmax(wmax, std::fabs(v));
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x.data() + i * cols;
      double sum_abs_x = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum_abs_x += std::fabs(xi[c]);
      tol.fp[i * rows + r] =
          (cols / 8.0 + 64.0) * std::ldexp(1.0, -23) * sum_abs_x * 4.0 * wmax + 1e-30;
      if (blk == 0) continue;
      double q = 0.0;
      for (int64_t b = 0; b < cols / blk; ++b) {
        double amax = 0.0, wsum = 0.0;
        for (int64_t c = b * blk; c < (b + 1) * blk; ++c) {
          amax = std::fmax(amax, std::fabs(xi[c]));
          wsum += std::fabs(wr[c]);
        }
        q += amax / 254.0 * wsum;
      }
      tol.quant[i * rows + r] = q * 1.001;
    }
  }
  return tol;
}

class MatmulTest : public ::testing::TestWithParam<GgmlType> {};

std::string TypeName(GgmlType t) {
  return std::string(GetGgmlTypeInfo(static_cast<uint32_t>(t))->name);
}

TEST_P(MatmulTest, MatchesReferenceAcrossShapes) {
  const GgmlType type = GetParam();
  const bool kquant = ActBlock(type) == 256;
  // Float formats have block size 1: also try widths that leave 16- and 8-lane tails.
  const std::vector<int64_t> col_set =
      kquant                 ? std::vector<int64_t>{256, 512, 1536, 4096}
      : ActBlock(type) == 32 ? std::vector<int64_t>{32, 64, 96, 576, 1536, 4096}
                             : std::vector<int64_t>{1, 13, 37, 64, 96, 576, 1536, 4096};
  std::mt19937 rng(1234 + static_cast<int>(type));
  ThreadPool pool(3);
  for (int64_t cols : col_set) {
    for (int64_t rows : {1, 33, 300}) {
      for (int64_t n : {1, 2, 5, 9}) {
        SCOPED_TRACE(TypeName(type) + " cols=" + std::to_string(cols) +
                     " rows=" + std::to_string(rows) + " n=" + std::to_string(n));
        const OwnedMatrix w = RandomMatrix(type, rows, cols, rng);
        const std::vector<float> x = RandomActivations(n, cols, rng);  // [n, cols]
        const std::vector<float> xq = QuantizedActivations(type, x, n, cols);
        std::vector<float> y(n * rows), y_ref(n * rows), y_ref_q(n * rows);  // [n, rows]
        Matmul(x.data(), n, w.view, y.data(), &pool);
        MatmulReference(x.data(), n, w.view, y_ref.data());
        MatmulReference(xq.data(), n, w.view, y_ref_q.data());
        const Tolerances tol = ComputeTolerances(type, w.view, x, n);
        for (int64_t e = 0; e < n * rows; ++e) {
          ASSERT_TRUE(std::isfinite(y[e])) << "element " << e;
          ASSERT_LE(std::fabs(static_cast<double>(y[e]) - y_ref_q[e]), tol.fp[e])
              << "vs quantized-activation reference, element " << e;
          ASSERT_LE(std::fabs(static_cast<double>(y[e]) - y_ref[e]), tol.fp[e] + tol.quant[e])
              << "vs fp32 reference, element " << e;
        }
      }
    }
  }
}

TEST_P(MatmulTest, ThreadCountAndBatchSizeDoNotChangeBits) {
  const GgmlType type = GetParam();
  const int64_t cols = ActBlock(type) == 256 ? 1536 : 576, rows = 517, n = 11;
  std::mt19937 rng(99);
  const OwnedMatrix w = RandomMatrix(type, rows, cols, rng);
  const std::vector<float> x = RandomActivations(n, cols, rng);  // [n, cols]
  std::vector<float> y0(n * rows);                               // [n, rows]
  Matmul(x.data(), n, w.view, y0.data(), nullptr);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> y(n * rows);
    Matmul(x.data(), n, w.view, y.data(), &pool);
    EXPECT_EQ(std::memcmp(y.data(), y0.data(), y.size() * 4), 0) << threads << " threads";
  }
  // Each activation row alone (decode) gives the same bits as inside the batch (prefill).
  std::vector<float> yi(rows);  // [rows]
  for (int64_t i = 0; i < n; ++i) {
    Matmul(x.data() + i * cols, 1, w.view, yi.data(), nullptr);
    EXPECT_EQ(std::memcmp(yi.data(), y0.data() + i * rows, rows * 4), 0) << "row " << i;
  }
}

TEST_P(MatmulTest, ZeroActivationsGiveZero) {
  const GgmlType type = GetParam();
  const int64_t cols = 512, rows = 20, n = 3;
  std::mt19937 rng(5);
  const OwnedMatrix w = RandomMatrix(type, rows, cols, rng);
  std::vector<float> x(n * cols, 0.0f), y(n * rows, 1.0f);
  Matmul(x.data(), n, w.view, y.data(), nullptr);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, MatmulTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                           GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kIQ4_NL,
                                           GgmlType::kIQ4_XS,
                                           GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                                           GgmlType::kQ5_K, GgmlType::kQ6_K),
                         [](const auto& info) { return TypeName(info.param); });

// The scalar fallbacks (used where AVX2 is absent) agree with the dispatched kernels.
TEST(MatmulScalarTest, ScalarKernelsMatchDispatchedKernels) {
  struct Case {
    GgmlType type;
    mi::RowDotFn fast, scalar;
  };
  const Case cases[] = {{GgmlType::kQ4_0, mi::DotQ4_0, mi::DotQ4_0Scalar},
                        {GgmlType::kQ4_1, mi::DotQ4_1, mi::DotQ4_1Scalar},
                        {GgmlType::kQ8_0, mi::DotQ8_0, mi::DotQ8_0Scalar},
                        {GgmlType::kIQ4_NL, mi::DotIQ4_NL, mi::DotIQ4_NLScalar},
                        {GgmlType::kIQ4_XS, mi::DotIQ4_XS, mi::DotIQ4_XSScalar},
                        {GgmlType::kQ5_0, mi::DotQ5_0, mi::DotQ5_0Scalar},
                        {GgmlType::kQ5_1, mi::DotQ5_1, mi::DotQ5_1Scalar},
                        {GgmlType::kQ2_K, mi::DotQ2_K, mi::DotQ2_KScalar},
                        {GgmlType::kQ3_K, mi::DotQ3_K, mi::DotQ3_KScalar},
                        {GgmlType::kQ4_K, mi::DotQ4_K, mi::DotQ4_KScalar},
                        {GgmlType::kQ5_K, mi::DotQ5_K, mi::DotQ5_KScalar},
                        {GgmlType::kQ6_K, mi::DotQ6_K, mi::DotQ6_KScalar}};
  std::mt19937 rng(77);
  const int64_t cols = 1536, rows = 16, n = 3;
  for (const Case& c : cases) {
    SCOPED_TRACE(TypeName(c.type));
    const OwnedMatrix w = RandomMatrix(c.type, rows, cols, rng);
    const std::vector<float> x = RandomActivations(n, cols, rng);
    const std::vector<float> xq = QuantizedActivations(c.type, x, n, cols);
    // Quantized activation bytes, [n, stride].
    const bool k = ActBlock(c.type) == 256;
    const size_t stride = k ? cols / 256 * sizeof(mi::BlockQ8_Kx) : mi::Q8_1RowBytes(cols);
    std::vector<uint8_t> act(stride * n);
    for (int64_t i = 0; i < n; ++i) {
      if (k) {
        mi::QuantizeRowQ8_K(x.data() + i * cols, cols,
                            reinterpret_cast<mi::BlockQ8_Kx*>(act.data() + i * stride));
      } else {
        mi::QuantizeRowQ8_1(x.data() + i * cols, cols, act.data() + i * stride);
      }
    }
    const Tolerances tol = ComputeTolerances(c.type, w.view, xq, n);
    for (int64_t r = 0; r < rows; ++r) {
      float fast[3], slow[3];
      c.fast(w.view.row(r), act.data(), stride, n, cols, fast);
      c.scalar(w.view.row(r), act.data(), stride, n, cols, slow);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_LE(std::fabs(fast[i] - slow[i]), 2 * tol.fp[i * rows + r]) << r << "," << i;
      }
    }
  }
}

// --- Instruction-set variants (avx2, avxvnni, avx512vnni, scalar) --------------------------

// Restores automatic variant selection when a test ends, even on an early ASSERT return.
struct OverrideGuard {
  ~OverrideGuard() { mi::ClearCpuKernelOverride(); }
};

std::vector<mi::CpuKernel> AvailableSimdKernels() {
  std::vector<mi::CpuKernel> out;
  for (mi::CpuKernel k : mi::kAllCpuKernels) {
    if (k != mi::CpuKernel::kScalar && mi::CpuKernelAvailable(k)) out.push_back(k);
  }
  return out;
}

// Sets every code byte of rows 0 and 1 to extremes: 0x80 (Q8_0: -128, the one value whose
// |w| needs the unsigned reading) and 0xFF (4-bit: 15 in both nibbles; Q8_0: -1).
void ForceExtremeCodes(GgmlType type, OwnedMatrix& m) {
  const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  const size_t head = type == GgmlType::kQ4_1 ? 4 : 2;  // fp16 d (and m) lead each block
  for (int64_t r = 0; r < std::min<int64_t>(2, m.view.rows); ++r) {
    uint8_t* row = m.bytes.data() + r * m.view.row_bytes;
    for (size_t b = 0; b < m.view.row_bytes; b += info->block_bytes) {
      std::memset(row + b + head, r == 0 ? 0x80 : 0xFF, info->block_bytes - head);
    }
  }
}

// Integer dots are exact and every SIMD variant keeps the AVX2 kernels' fp32 op order, so
// they must agree bit for bit through the whole Matmul (tiles of 4 vs 8 rows, nb % 8 tails).
TEST(MatmulVariantTest, AllSimdVariantsGiveIdenticalBits) {
  if (!mi::CpuKernelAvailable(mi::CpuKernel::kAvx2)) {
    GTEST_SKIP() << "no AVX2 here";
  }
  OverrideGuard guard;
  const std::vector<mi::CpuKernel> kernels = AvailableSimdKernels();
  std::string names;
  for (mi::CpuKernel k : kernels) names += std::string(mi::CpuKernelName(k)) + " ";
  std::printf("SIMD variants available here: %s\n", names.c_str());
  const GgmlType types[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                            GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                            GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS,
                            GgmlType::kF32,  GgmlType::kF16};
  std::mt19937 rng(2024);
  for (GgmlType type : types) {
    const std::vector<int64_t> col_set =
        ActBlock(type) == 256  ? std::vector<int64_t>{256, 1536}
        : ActBlock(type) == 32 ? std::vector<int64_t>{32, 64, 96, 256, 288, 544, 576, 1536}
                               : std::vector<int64_t>{13, 576};
    for (int64_t cols : col_set) {
      const int64_t rows = 29;
      OwnedMatrix w = RandomMatrix(type, rows, cols, rng);
      if (ActBlock(type) == 32) ForceExtremeCodes(type, w);
      for (int64_t n : {1, 3, 4, 5, 8, 9, 16, 17}) {
        SCOPED_TRACE(TypeName(type) + " cols=" + std::to_string(cols) + " n=" + std::to_string(n));
        const std::vector<float> x = RandomActivations(n, cols, rng);  // [n, cols]
        std::vector<float> y_avx2(n * rows);                           // [n, rows]
        mi::SetCpuKernelOverride(mi::CpuKernel::kAvx2);
        Matmul(x.data(), n, w.view, y_avx2.data(), nullptr);
        for (mi::CpuKernel k : kernels) {
          mi::SetCpuKernelOverride(k);
          ASSERT_EQ(mi::SelectedCpuKernel(), k);
          std::vector<float> y(n * rows, -1.0f);  // [n, rows]
          Matmul(x.data(), n, w.view, y.data(), nullptr);
          for (int64_t e = 0; e < n * rows; ++e) {
            ASSERT_EQ(std::memcmp(&y[e], &y_avx2[e], 4), 0)
                << mi::CpuKernelName(k) << " element " << e << ": " << y[e] << " vs avx2 "
                << y_avx2[e];
          }
        }
      }
    }
  }
}

// Each variant's row dot, called directly for every tile width it accepts, gives every
// activation row the bits of a lone nx = 1 call of the AVX2 kernel (batch invariance).
TEST(MatmulVariantTest, TileWidthDoesNotChangeBits) {
  if (!mi::CpuKernelAvailable(mi::CpuKernel::kAvx2)) {
    GTEST_SKIP() << "no AVX2 here";
  }
  std::mt19937 rng(31);
  const int64_t cols = 576, rows = 4;  // 18 blocks: two groups of 8 and a tail of 2
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0}) {
    SCOPED_TRACE(TypeName(type));
    const OwnedMatrix w = RandomMatrix(type, rows, cols, rng);
    const int64_t n = mi::kMaxWideTile;
    const std::vector<float> x = RandomActivations(n, cols, rng);  // [n, cols]
    const size_t stride = mi::Q8_1RowBytes(cols);
    std::vector<uint8_t> act(stride * n);  // [n, stride]
    for (int64_t i = 0; i < n; ++i) {
      mi::QuantizeRowQ8_1(x.data() + i * cols, cols, act.data() + i * stride);
    }
    const mi::RowDotFn avx2 = mi::RowDotFor(type, mi::CpuKernel::kAvx2).dot;
    for (mi::CpuKernel k : AvailableSimdKernels()) {
      const mi::RowDot rd = mi::RowDotFor(type, k);
      ASSERT_NE(rd.dot, nullptr);
      for (int64_t r = 0; r < rows; ++r) {
        for (int nx = 1; nx <= rd.max_tile; ++nx) {
          float out[mi::kMaxWideTile];
          rd.dot(w.view.row(r), act.data(), stride, nx, cols, out);
          for (int j = 0; j < nx; ++j) {
            float lone;
            avx2(w.view.row(r), act.data() + j * stride, stride, 1, cols, &lone);
            EXPECT_EQ(std::memcmp(&out[j], &lone, 4), 0)
                << mi::CpuKernelName(k) << " row " << r << " nx " << nx << " j " << j;
          }
        }
      }
    }
  }
}

TEST(MatmulVariantTest, OverrideAlwaysSelectsAnAvailableVariant) {
  OverrideGuard guard;
  EXPECT_TRUE(mi::CpuKernelAvailable(mi::SelectedCpuKernel()));
  for (mi::CpuKernel k : mi::kAllCpuKernels) {
    mi::SetCpuKernelOverride(k);
    const mi::CpuKernel sel = mi::SelectedCpuKernel();
    EXPECT_TRUE(mi::CpuKernelAvailable(sel)) << mi::CpuKernelName(k);
    EXPECT_LE(static_cast<int>(sel), static_cast<int>(k)) << mi::CpuKernelName(k);
    if (mi::CpuKernelAvailable(k)) {
      EXPECT_EQ(sel, k);
    }
  }
  mi::ClearCpuKernelOverride();
  EXPECT_TRUE(mi::CpuKernelAvailable(mi::SelectedCpuKernel()));
}

// The scalar variant sums in another order, so it is held to the fp32 tolerance against the
// quantized-activation reference (see the top of this file), through the full Matmul.
TEST(MatmulVariantTest, ScalarVariantMatchesReference) {
  OverrideGuard guard;
  mi::SetCpuKernelOverride(mi::CpuKernel::kScalar);
  ASSERT_EQ(mi::SelectedCpuKernel(), mi::CpuKernel::kScalar);
  std::mt19937 rng(8);
  for (GgmlType type :
       {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kIQ4_NL,
        GgmlType::kIQ4_XS, GgmlType::kQ2_K,
        GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(TypeName(type));
    const int64_t cols = ActBlock(type) == 256 ? 512 : 576, rows = 21, n = 9;
    const OwnedMatrix w = RandomMatrix(type, rows, cols, rng);
    const std::vector<float> x = RandomActivations(n, cols, rng);  // [n, cols]
    const std::vector<float> xq = QuantizedActivations(type, x, n, cols);
    std::vector<float> y(n * rows), y_ref_q(n * rows);  // [n, rows]
    Matmul(x.data(), n, w.view, y.data(), nullptr);
    MatmulReference(xq.data(), n, w.view, y_ref_q.data());
    const Tolerances tol = ComputeTolerances(type, w.view, x, n);
    for (int64_t e = 0; e < n * rows; ++e) {
      ASSERT_LE(std::fabs(static_cast<double>(y[e]) - y_ref_q[e]), tol.fp[e]) << "element " << e;
    }
  }
}

TEST(ActivationQuantTest, ErrorWithinHalfStepAndSumsConsistent) {
  std::mt19937 rng(3);
  const int64_t cols = 512;
  const std::vector<float> x = RandomActivations(1, cols, rng);
  std::vector<uint8_t> q1_bytes(mi::Q8_1RowBytes(cols));
  mi::QuantizeRowQ8_1(x.data(), cols, q1_bytes.data());
  const mi::Q8_1Row q1 = mi::ViewQ8_1Row(q1_bytes.data(), cols);
  for (int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
      sum += q1.qs[b * 32 + i];
    }
    EXPECT_FLOAT_EQ(q1.d[b], amax / 127.0f);
    EXPECT_FLOAT_EQ(q1.s[b], q1.d[b] * sum);
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(x[b * 32 + i] - q1.d[b] * q1.qs[b * 32 + i]), q1.d[b] * 0.5f * 1.0001f);
    }
  }
  std::vector<mi::BlockQ8_Kx> qk(cols / 256);
  mi::QuantizeRowQ8_K(x.data(), cols, qk.data());
  for (int64_t b = 0; b < cols / 256; ++b) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += qk[b].qs[16 * g + i];
      EXPECT_EQ(qk[b].bsums[g], sum);
    }
    for (int i = 0; i < 256; ++i) {
      EXPECT_LE(std::fabs(x[b * 256 + i] - qk[b].d * qk[b].qs[i]), qk[b].d * 0.5f * 1.0001f);
    }
  }
}

// QuantizeRowQ8_1 (AVX2 where built) against the documented scalar rule, bit for bit:
// d = max|x| / 127 over non-NaN elements, q = clamp(nearbyint(x·(1/d)), ±127), NaN → 0,
// s = d·Σq. Covers exact ties (x·id = k + 0.5 rounds to even), NaN, ±inf and all-zero blocks.
TEST(ActivationQuantTest, MatchesScalarRuleBitForBit) {
  std::mt19937 rng(9);
  const int64_t cols = 32 * 8;
  std::vector<float> x = RandomActivations(1, cols, rng);
  // Block 0: max 127 makes d = id = 1, so the half-integers are exact ties (−15.5 … 14.5:
  // round-half-even sends them both ways). Block 1: exact integers.
  x[0] = 127.0f;
  for (int i = 1; i < 32; ++i) x[i] = (i - 16) + 0.5f;
  for (int i = 0; i < 32; ++i) x[32 + i] = 127.0f - 2.0f * i;
  x[64 + 3] = std::nanf("");                                   // block 2: a NaN
  x[96 + 5] = INFINITY;                                        // block 3: +inf
  x[96 + 6] = -INFINITY;
  for (int i = 0; i < 32; ++i) x[128 + i] = 0.0f;              // block 4: zeros
  std::vector<uint8_t> bytes(mi::Q8_1RowBytes(cols));
  mi::QuantizeRowQ8_1(x.data(), cols, bytes.data());
  const mi::Q8_1Row q = mi::ViewQ8_1Row(bytes.data(), cols);
  for (int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float a = std::fabs(x[b * 32 + i]);
      amax = a > amax ? a : amax;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      float v = std::nearbyint(x[b * 32 + i] * id);
      v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
      const int8_t want = v == v ? static_cast<int8_t>(v) : 0;
      ASSERT_EQ(q.qs[b * 32 + i], want) << "block " << b << " element " << i;
      sum += want;
    }
    EXPECT_EQ(std::memcmp(&q.d[b], &d, 4), 0) << b;
    const float s = d * static_cast<float>(sum);
    EXPECT_EQ(std::memcmp(&q.s[b], &s, 4), 0) << b;
  }
}

TEST(MatmulTest, RowBytesNotMatchingColsYieldsNaN) {
  std::vector<uint8_t> bytes(40 * 2, 0);
  QuantMatrix w{GgmlType::kQ4_1, 2, 48, 40, bytes.data()};  // 48 is not a multiple of 32
  std::vector<float> x(48, 1.0f), y(2, 0.0f);
  Matmul(x.data(), 1, w, y.data(), nullptr);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

TEST(MatmulTest, UnsupportedFormatYieldsNaN) {
  std::vector<uint8_t> bytes(36 * 2, 0);
  QuantMatrix w{GgmlType::kQ8_1, 2, 32, 36, bytes.data()};  // an activation format, never a weight
  std::vector<float> x(32, 1.0f), y(2, 0.0f);
  Matmul(x.data(), 1, w, y.data(), nullptr);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

// MatmulMany (Q/K/V and gate/up share one activation quantization and one parallel pass)
// must give exactly the bits of separate Matmul calls, for every format, thread count and
// batch size, and fall back cleanly when the matrices differ in format.
TEST(MatmulManyTest, BitIdenticalToSeparateCalls) {
  std::mt19937 rng(31);
  ThreadPool pool(3);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                        GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ5_0,
                        GgmlType::kQ5_1, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kF16, GgmlType::kF32}) {
    const int64_t cols = 512;
    OwnedMatrix a = RandomMatrix(type, 96, cols, rng), b = RandomMatrix(type, 32, cols, rng),
                c = RandomMatrix(type, 32, cols, rng);
    OwnedMatrix other = RandomMatrix(type == GgmlType::kF32 ? GgmlType::kF16 : GgmlType::kF32,
                                     40, cols, rng);
    for (int64_t n : {1, 5, 16}) {
      std::vector<float> x(n * cols);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : x) v = nd(rng);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const QuantMatrix* ws[3] = {&a.view, &b.view, &c.view};
        std::vector<float> ya(n * 96), yb(n * 32), yc(n * 32);
        float* ys[3] = {ya.data(), yb.data(), yc.data()};
        MatmulMany(x.data(), n, ws, ys, 3, p);
        std::vector<float> ra(n * 96), rb(n * 32), rc(n * 32);
        Matmul(x.data(), n, a.view, ra.data(), p);
        Matmul(x.data(), n, b.view, rb.data(), p);
        Matmul(x.data(), n, c.view, rc.data(), p);
        ASSERT_EQ(0, std::memcmp(ya.data(), ra.data(), ra.size() * 4)) << GetGgmlTypeInfo(static_cast<uint32_t>(type))->name;
        ASSERT_EQ(0, std::memcmp(yb.data(), rb.data(), rb.size() * 4));
        ASSERT_EQ(0, std::memcmp(yc.data(), rc.data(), rc.size() * 4));
        // Mixed formats: separate calls under the hood, same results.
        const QuantMatrix* mixed[2] = {&a.view, &other.view};
        std::vector<float> yo(n * 40), ro(n * 40);
        float* ys2[2] = {ya.data(), yo.data()};
        MatmulMany(x.data(), n, mixed, ys2, 2, p);
        Matmul(x.data(), n, other.view, ro.data(), p);
        ASSERT_EQ(0, std::memcmp(ya.data(), ra.data(), ra.size() * 4));
        ASSERT_EQ(0, std::memcmp(yo.data(), ro.data(), ro.size() * 4));
      }
    }
  }
}

}  // namespace
}  // namespace witcert
