// The batch-1 GEMV (kernels/cuda/ops/gemv_bf16_cuda.h) against a double-precision reference.
// Tolerance: fp32 accumulation of `cols` products in 4·32 partial sums then a shuffle tree, each
// rounding ≤ u relative to the running |sum| ≤ Σ|w x|: |error| ≤ (cols/128 + 12)·u·Σ|w x|; we
// allow 4× that. beta = 1 adds y's old value (one more rounding). The fp32-input variant must
// match the two-kernel path it replaces exactly.
#include <cmath>
#include <cstring>
#include <deque>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/ops/gemv_bf16_cuda.h"
#include "kernels/cuda/ops/transformer_ops_cuda.h"
#include "tests/kernels/cuda_ops/ops_test_util.h"

namespace witcert {
namespace {

using testing::Dev;
using testing::RandomFloats;

uint16_t TruncBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}
double FromBf16(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(GemvBf16Cuda, MatchesDoubleReference) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t rows, cols;
    float beta;
  };
  // Model shapes (8B QKV, O with beta = 1, down from 14336), ragged row counts and columns that
  // leave a tail after the unrolled loop, and the largest supported width.
  for (const Shape s : {Shape{6144, 4096, 0.0f}, Shape{4096, 4096, 1.0f}, Shape{4096, 14336, 1.0f},
                        Shape{37, 24, 0.0f}, Shape{5, 8, 1.0f}, Shape{1001, 1032, 0.0f},
                        Shape{3, 24576, 0.0f}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    const std::vector<float> xf = RandomFloats(s.cols, 3 + s.cols, -2, 2);
    const std::vector<float> wf = RandomFloats(s.rows * s.cols, 5 + s.rows, -1, 1);
    const std::vector<float> y0 = RandomFloats(s.rows, 7, -3, 3);
    std::vector<uint16_t> x(s.cols), w(s.rows * s.cols);
    for (int64_t i = 0; i < s.cols; ++i) x[i] = TruncBf16(xf[i]);
    for (int64_t i = 0; i < s.rows * s.cols; ++i) w[i] = TruncBf16(wf[i]);
    const double u = std::ldexp(1.0, -24);
    std::vector<double> ref(s.rows), tol(s.rows);
    for (int64_t r = 0; r < s.rows; ++r) {
      double sum = s.beta * double(y0[r]), mag = std::fabs(s.beta * double(y0[r]));
      for (int64_t c = 0; c < s.cols; ++c) {
        const double p = FromBf16(w[r * s.cols + c]) * FromBf16(x[c]);
        sum += p;
        mag += std::fabs(p);
      }
      ref[r] = sum;
      tol[r] = 4.0 * (s.cols / 128.0 + 13.0) * u * mag + 1e-30;
    }
    Dev<uint16_t> dx(x), dw(w);
    ASSERT_TRUE(GemvBf16Supports(s.cols, dx.get(), dw.get()));
    for (int rows_per_warp : {1, 2, 4}) {  // row counts not divisible by 8 · rows_per_warp too
      SCOPED_TRACE("rows per warp " + std::to_string(rows_per_warp));
      Dev<float> dy(y0);
      const CudaStatus st =
          GemvBf16Cuda(dx.get(), s.cols, dw.get(), s.rows, dy.get(), s.beta, nullptr, {rows_per_warp});
      ASSERT_TRUE(st.ok) << st.message;
      const std::vector<float> y = dy.Get();
      for (int64_t r = 0; r < s.rows; ++r) ASSERT_NEAR(y[r], ref[r], tol[r]) << "row " << r;
    }
  }
}

// The fp32-input GEMV stages x itself (rounded, or RMS-normalized then rounded): y must equal
// FloatToBf16Cuda / RmsNormCuda followed by GemvBf16Cuda bit for bit, for every row width.
TEST(GemvBf16Cuda, FromF32IsTheTwoKernelPathBitForBit) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t rows, cols;
    float beta;
  };
  for (const Shape s : {Shape{6144, 4096, 0.0f}, Shape{4096, 4096, 1.0f}, Shape{37, 24, 0.0f},
                        Shape{1001, 1032, 1.0f}, Shape{5, 8192, 0.0f}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    const std::vector<float> xf = RandomFloats(s.cols, 11 + s.cols, -40, 40);
    const std::vector<float> nw = RandomFloats(s.cols, 13 + s.cols, -2, 2);
    const std::vector<float> wf = RandomFloats(s.rows * s.cols, 17 + s.rows, -1, 1);
    const std::vector<float> y0 = RandomFloats(s.rows, 19, -3, 3);
    std::vector<uint16_t> w(s.rows * s.cols);
    for (int64_t i = 0; i < s.rows * s.cols; ++i) w[i] = TruncBf16(wf[i]);
    Dev<float> dx(xf), dn(nw);
    Dev<uint16_t> dw(w), staged(std::vector<uint16_t>(s.cols));
    ASSERT_TRUE(GemvBf16FromF32Supports(s.cols, dx.get(), dw.get(), dn.get()));
    for (bool norm : {false, true}) {
      if (norm) {
        ASSERT_TRUE(RmsNormCuda(dx.get(), dn.get(), 1, s.cols, 1e-5f, nullptr, staged.get(), nullptr).ok);
      } else {
        ASSERT_TRUE(FloatToBf16Cuda(dx.get(), s.cols, staged.get(), nullptr).ok);
      }
      for (int rows_per_warp : {1, 2, 4}) {
        SCOPED_TRACE(std::string(norm ? "norm" : "cast") + ", rows per warp " + std::to_string(rows_per_warp));
        Dev<float> two(y0), fused(y0);
        ASSERT_TRUE(GemvBf16Cuda(staged.get(), s.cols, dw.get(), s.rows, two.get(), s.beta, nullptr, {rows_per_warp}).ok);
        const CudaStatus st = GemvBf16FromF32Cuda(dx.get(), norm ? dn.get() : nullptr, 1e-5f, s.cols, dw.get(),
                                                  s.rows, fused.get(), s.beta, nullptr, {rows_per_warp});
        ASSERT_TRUE(st.ok) << st.message;
        const std::vector<float> a = two.Get(), b = fused.Get();
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
      }
    }
  }
}

// A dependent chain of GEMVs launched to overlap their predecessors (programmatic dependent
// launch) gives the bits of the same chain launched plainly: each one reads x, and reads and
// accumulates y, only after the kernel before it is done. Each link reads the previous output
// (as the batch-1 decode step's projections do) and every third accumulates into a buffer two
// links back, so a missing or misplaced wait reads a stale or half-written row.
TEST(GemvBf16Cuda, OverlappedChainIsThePlainChainBitForBit) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kDim = 4096, kLinks = 12;
  std::deque<Dev<uint16_t>> w;  // Dev neither copies nor moves
  for (int64_t i = 0; i < 3; ++i) {
    const std::vector<float> wf = RandomFloats(kDim * kDim, 23 + i, -1, 1);
    std::vector<uint16_t> wb(kDim * kDim);
    for (int64_t j = 0; j < kDim * kDim; ++j) wb[j] = TruncBf16(wf[j] / 64.0f);
    w.emplace_back(wb);
  }
  const std::vector<float> x0 = RandomFloats(kDim, 29, -2, 2), nw = RandomFloats(kDim, 31, 0.5, 1.5);
  Dev<float> dn(nw);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<std::vector<float>> outs;
  for (bool overlap : {false, true}) {
    std::deque<Dev<float>> buf;
    for (int i = 0; i < 3; ++i) buf.emplace_back(x0);
    for (int64_t k = 0; k < kLinks; ++k) {
      const float* in = buf[k % 3].get();
      float* out = buf[(k + 1) % 3].get();
      const float beta = k % 3 == 2 ? 1.0f : 0.0f;
      const float* norm = k % 2 == 0 ? dn.get() : nullptr;
      const CudaStatus st =
          GemvBf16FromF32Cuda(in, norm, 1e-5f, kDim, w[k % 3].get(), kDim, out, beta, stream, {2, overlap});
      ASSERT_TRUE(st.ok) << st.message;
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> all;
    for (auto& b : buf) {
      const std::vector<float> v = b.Get();
      all.insert(all.end(), v.begin(), v.end());
    }
    outs.push_back(all);
  }
  cudaStreamDestroy(stream);
  ASSERT_EQ(outs[0].size(), outs[1].size());
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)), 0);
  bool finite = true;
  for (float v : outs[1]) finite = finite && std::isfinite(v);
  EXPECT_TRUE(finite);
}

TEST(GemvBf16Cuda, RejectsShapesItDoesNotTake) {
  SKIP_WITHOUT_GPU();
  Dev<uint16_t> x(std::vector<uint16_t>(24584)), w(std::vector<uint16_t>(24584));
  Dev<float> y(std::vector<float>(4));
  EXPECT_FALSE(GemvBf16Supports(12, x.get(), w.get()));        // cols % 8
  EXPECT_FALSE(GemvBf16Supports(24584, x.get(), w.get()));     // x beyond shared memory
  EXPECT_FALSE(GemvBf16Supports(16, x.get() + 1, w.get()));    // misaligned x
  EXPECT_FALSE(GemvBf16Cuda(x.get(), 12, w.get(), 1, y.get(), 0.0f, nullptr).ok);
  EXPECT_FALSE(GemvBf16Cuda(x.get(), 16, w.get(), 1, y.get(), 0.0f, nullptr, {3}).ok);
  Dev<float> xf(std::vector<float>(8200));
  EXPECT_FALSE(GemvBf16FromF32Supports(8200, xf.get(), w.get(), nullptr));    // x beyond registers
  EXPECT_FALSE(GemvBf16FromF32Supports(16, xf.get(), w.get(), xf.get() + 1));  // misaligned norm
  EXPECT_FALSE(GemvBf16FromF32Cuda(xf.get(), nullptr, 1e-5f, 8200, w.get(), 1, y.get(), 0.0f, nullptr).ok);
}

}  // namespace
}  // namespace witcert
