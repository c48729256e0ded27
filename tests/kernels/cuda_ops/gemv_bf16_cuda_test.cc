// The batch-1 GEMV (kernels/cuda/ops/gemv_bf16_cuda.h) against a double-precision reference.
// Tolerance: fp32 accumulation of `cols` products in 4·32 partial sums then a shuffle tree, each
// rounding ≤ u relative to the running |sum| ≤ Σ|w x|: |error| ≤ (cols/128 + 12)·u·Σ|w x|; we
// allow 4× that. beta = 1 adds y's old value (one more rounding). The fp32-input variant must
// match the two-kernel path it replaces exactly.
#include <cmath>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/ops/gemv_bf16_cuda.h"
#include "kernels/cuda/ops/transformer_ops_cuda.h"
#include "tests/kernels/cuda/late_copy_cuda.h"
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
  // Plain, overlapped, and overlapped with the rows' rest prefetched into shared memory (4096 ×
  // 4096 at 2 rows per warp is one wave of 256 CTAs on an H200: the prefetch applies).
  for (const GemvLaunch launch : {GemvLaunch{2, false, false}, GemvLaunch{2, true, false}, GemvLaunch{2, true, true}}) {
    std::deque<Dev<float>> buf;
    for (int i = 0; i < 3; ++i) buf.emplace_back(x0);
    for (int64_t k = 0; k < kLinks; ++k) {
      const float* in = buf[k % 3].get();
      float* out = buf[(k + 1) % 3].get();
      const float beta = k % 3 == 2 ? 1.0f : 0.0f;
      const float* norm = k % 2 == 0 ? dn.get() : nullptr;
      const CudaStatus st =
          GemvBf16FromF32Cuda(in, norm, 1e-5f, kDim, w[k % 3].get(), kDim, out, beta, stream, launch);
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
  for (size_t i = 1; i < outs.size(); ++i) {
    ASSERT_EQ(outs[0].size(), outs[i].size());
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[i].data(), outs[0].size() * sizeof(float)), 0) << "launch " << i;
  }
  bool finite = true;
  for (float v : outs[2]) finite = finite && std::isfinite(v);
  EXPECT_TRUE(finite);
}

// A GEMV of at most two CTAs per SM keeps two loop steps' weight loads in flight, a larger one
// one step: the same rows must come out with the same bits either way. The first rows of a tall
// W (many CTAs, one step) against the same rows alone (few CTAs, two steps), for bf16 and normed
// fp32 x, at widths with and without a leftover step and tail.
TEST(GemvBf16Cuda, StepsInFlightDoNotChangeBits) {
  SKIP_WITHOUT_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t few_rows = 16 * sms, tall_rows = 64 * sms;  // 1 and 4 CTAs per SM (16 rows each)
  for (const int64_t cols : {int64_t{4096}, int64_t{1032}, int64_t{14336}}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    std::vector<uint16_t> w(tall_rows * cols);
    const std::vector<float> wf = RandomFloats(tall_rows * cols, 37 + cols, -1, 1);
    for (int64_t i = 0; i < tall_rows * cols; ++i) w[i] = TruncBf16(wf[i]);
    const std::vector<float> xf = RandomFloats(cols, 41 + cols, -3, 3), nw = RandomFloats(cols, 43, 0.5, 1.5);
    std::vector<uint16_t> xb(cols);
    for (int64_t i = 0; i < cols; ++i) xb[i] = TruncBf16(xf[i]);
    Dev<uint16_t> dw(w), dxb(xb);
    Dev<float> dxf(xf), dn(nw);
    for (const bool from_f32 : {false, true}) {
      if (from_f32 && cols > 8192) continue;
      SCOPED_TRACE(from_f32 ? "fp32 x, normed" : "bf16 x");
      std::vector<std::vector<float>> ys;
      // The few rows again with their rest prefetched into shared memory (where it fits: 4096
      // columns; the others take the plain path).
      for (const auto& [rows, prefetch] : {std::pair{tall_rows, false}, std::pair{few_rows, false},
                                           std::pair{few_rows, true}}) {
        Dev<float> y(std::vector<float>(rows, 0.0f));
        const GemvLaunch launch{2, false, prefetch};
        const CudaStatus st =
            from_f32 ? GemvBf16FromF32Cuda(dxf.get(), dn.get(), 1e-5f, cols, dw.get(), rows, y.get(), 0.0f, nullptr, launch)
                     : GemvBf16Cuda(dxb.get(), cols, dw.get(), rows, y.get(), 0.0f, nullptr, launch);
        ASSERT_TRUE(st.ok) << st.message;
        ys.push_back(y.Get());
      }
      ASSERT_EQ(std::memcmp(ys[0].data(), ys[1].data(), few_rows * sizeof(float)), 0);
      ASSERT_EQ(std::memcmp(ys[0].data(), ys[2].data(), few_rows * sizeof(float)), 0);
    }
  }
}

std::vector<uint16_t> RandomBf16(int64_t count, uint32_t seed, float scale) {
  const std::vector<float> f = RandomFloats(count, seed, -1, 1);
  std::vector<uint16_t> b(count);
  for (int64_t i = 0; i < count; ++i) b[i] = TruncBf16(f[i] * scale);
  return b;
}

template <class T>
void ExpectSameBits(const std::vector<T>& a, const std::vector<T>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(T)), 0) << "element " << i << ": " << a[i] << " vs " << b[i];
  }
}

// The SwiGLU epilogue (warp j: gate row j and up row ffn + j) against the gate|up GEMV followed
// by SwiGluCuda, bit for bit: the 8B and SmolLM shapes and a ragged one, normed and not.
TEST(GemvBf16Cuda, SwiGluEpilogueIsTheTwoKernelPathBitForBit) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t ffn, cols;
  };
  for (const Shape s : {Shape{14336, 4096}, Shape{1536, 576}, Shape{37, 24}}) {
    SCOPED_TRACE(std::to_string(s.ffn) + "x" + std::to_string(s.cols));
    const std::vector<float> xf = RandomFloats(s.cols, 41 + s.cols, -8, 8);
    const std::vector<float> nw = RandomFloats(s.cols, 43, 0.5, 1.5);
    // Weights large enough that g spans silu's whole shape (e^{−g} over- and underflowing).
    Dev<uint16_t> dw(RandomBf16(2 * s.ffn * s.cols, 47 + s.ffn, 4.0f / std::sqrt(double(s.cols))));
    Dev<float> dx(xf), dn(nw);
    for (bool norm : {false, true}) {
      SCOPED_TRACE(norm ? "norm" : "cast");
      const float* nwp = norm ? dn.get() : nullptr;
      Dev<float> gate_up(static_cast<size_t>(2 * s.ffn));
      Dev<uint16_t> two(static_cast<size_t>(s.ffn)), fused(static_cast<size_t>(s.ffn));
      ASSERT_TRUE(GemvBf16FromF32Cuda(dx.get(), nwp, 1e-5f, s.cols, dw.get(), 2 * s.ffn, gate_up.get(), 0.0f,
                                      nullptr, {2}).ok);
      ASSERT_TRUE(SwiGluCuda(gate_up.get(), gate_up.get() + s.ffn, 1, s.ffn, 2 * s.ffn, nullptr, two.get(),
                             nullptr).ok);
      const CudaStatus st = GemvBf16SwiGluCuda(dx.get(), nwp, 1e-5f, s.cols, dw.get(), s.ffn, fused.get(), nullptr);
      ASSERT_TRUE(st.ok) << st.message;
      ExpectSameBits(two.Get(), fused.Get());
    }
  }
}

// QKV shapes of the RoPE-split tests: 8B (GQA 32/8, d = 128), SmolLM (9/3, d = 64), a tiny one.
struct RopeShape {
  int32_t hq, hkv, d;
  int64_t cols;
  int64_t Rows() const { return int64_t{hq + 2 * hkv} * d; }
  std::string Name() const { return std::to_string(hq) + "/" + std::to_string(hkv) + " d " + std::to_string(d); }
  // The RoPE-split outputs of this shape (halves pairing, GemvRopeSplitOut's default, unless told otherwise).
  GemvRopeSplitOut Targets(const float* bias, const int64_t* position, float theta, float* q, float* k, float* v,
                           bool interleaved = false) const {
    return GemvRopeSplitOut{.num_heads = hq, .num_kv_heads = hkv, .head_dim = d, .bias = bias, .position = position,
                            .freq = theta, .interleaved = interleaved, .q = q, .k = k, .v = v};
  }
};
constexpr RopeShape kRopeShapes[] = {{32, 8, 128, 4096}, {9, 3, 64, 576}, {2, 1, 8, 16}};

// A RoPE-split test's random inputs on the device: x, the norm weight, the bias, W_qkv and the
// position. seeds: x's, the norm's, the bias's and W's.
struct RopeInputs {
  RopeInputs(const RopeShape& s, const uint32_t (&seeds)[4], int64_t position)
      : x(RandomFloats(s.cols, seeds[0] + s.cols, -4, 4)),
        norm(RandomFloats(s.cols, seeds[1], 0.5, 1.5)),
        bias(RandomFloats(s.Rows(), seeds[2] + s.Rows(), -1, 1)),
        w(RandomBf16(s.Rows() * s.cols, seeds[3] + s.Rows(), 1.0f)),
        pos(std::vector<int64_t>{position}) {}
  Dev<float> x, norm, bias;
  Dev<uint16_t> w;
  Dev<int64_t> pos;
};

// The RoPE-split epilogue (warp: the two rows of one rotation pair, or two v rows) against the
// QKV GEMV, the bias add and RopeSplitQkvCuda, bit for bit: 8B (GQA 32/8, d = 128), SmolLM
// (9/3, d = 64) and a tiny shape, both pairings, with and without a bias, at a large position.
TEST(GemvBf16Cuda, RopeSplitEpilogueIsTheThreeKernelPathBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const RopeShape s : kRopeShapes) {
    const int64_t rows = s.Rows(), qd = int64_t{s.hq} * s.d, kvd = int64_t{s.hkv} * s.d;
    SCOPED_TRACE(s.Name());
    const RopeInputs in(s, {53, 59, 61, 67}, 123457);
    for (bool interleaved : {false, true}) {
      for (bool bias : {false, true}) {
        SCOPED_TRACE(std::string(interleaved ? "interleaved" : "halves") + (bias ? ", bias" : ""));
        Dev<float> qkv(static_cast<size_t>(rows));
        Dev<float> q2(static_cast<size_t>(qd)), k2(static_cast<size_t>(kvd)), v2(static_cast<size_t>(kvd));
        Dev<float> q1(static_cast<size_t>(qd)), k1(static_cast<size_t>(kvd)), v1(static_cast<size_t>(kvd));
        ASSERT_TRUE(GemvBf16FromF32Cuda(in.x.get(), in.norm.get(), 1e-5f, s.cols, in.w.get(), rows, qkv.get(), 0.0f, nullptr,
                                        {2}).ok);
        if (bias) {
          ASSERT_TRUE(AddBiasRowsCuda(qkv.get(), 1, rows, rows, in.bias.get(), nullptr).ok);
        }
        ASSERT_TRUE(RopeSplitQkvCuda(qkv.get(), 1, rows, s.hq, s.hkv, s.d, in.pos.get(), 500000.0f, interleaved,
                                     q2.get(), k2.get(), v2.get(), nullptr).ok);
        const GemvRopeSplitOut out = s.Targets(bias ? in.bias.get() : nullptr, in.pos.get(), 500000.0f, q1.get(),
                                               k1.get(), v1.get(), interleaved);
        const CudaStatus st = GemvBf16RopeSplitCuda(in.x.get(), in.norm.get(), 1e-5f, s.cols, in.w.get(), out, nullptr);
        ASSERT_TRUE(st.ok) << st.message;
        ExpectSameBits(q2.Get(), q1.Get());
        ExpectSameBits(k2.Get(), k1.Get());
        ExpectSameBits(v2.Get(), v1.Get());
      }
    }
  }
}

// The batch-1 step's two launches around the KV write (RopeSplitRows): k and v first, then q as a
// programmatic dependent launch behind a kernel that lets it start at once, sleeps 0.2 ms and only
// then writes poison over q. kQueries computes before its wait but stores after it, so q ends as
// the one-launch projection's bits; a store before the wait would be overwritten by the poison.
TEST(GemvBf16Cuda, RopeSplitRowsInTwoLaunchesAreTheOneLaunchBits) {
  SKIP_WITHOUT_GPU();
  for (const RopeShape s : kRopeShapes) {
    const int64_t qd = int64_t{s.hq} * s.d, kvd = int64_t{s.hkv} * s.d;
    SCOPED_TRACE(s.Name());
    const RopeInputs in(s, {71, 73, 79, 83}, 4099);
    Dev<float> poison(std::vector<float>(static_cast<size_t>(qd), NAN));
    Dev<float> q1(static_cast<size_t>(qd)), k1(static_cast<size_t>(kvd)), v1(static_cast<size_t>(kvd));
    Dev<float> q2(static_cast<size_t>(qd)), k2(static_cast<size_t>(kvd)), v2(static_cast<size_t>(kvd));
    GemvRopeSplitOut out = s.Targets(in.bias.get(), in.pos.get(), 10000.0f, q1.get(), k1.get(), v1.get());
    EXPECT_KERNEL_OK(GemvBf16RopeSplitCuda(in.x.get(), in.norm.get(), 1e-5f, s.cols, in.w.get(), out, nullptr));
    out.q = q2.get();
    out.k = k2.get();
    out.v = v2.get();
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_TRUE(GemvBf16RopeSplitCuda(in.x.get(), in.norm.get(), 1e-5f, s.cols, in.w.get(), out, stream, false,
                                      RopeSplitRows::kKeysValues).ok);
    ASSERT_TRUE(testing::LateCopyCuda(poison.get(), q2.get(), qd * sizeof(float), 200'000, stream).ok);
    ASSERT_TRUE(GemvBf16RopeSplitCuda(in.x.get(), in.norm.get(), 1e-5f, s.cols, in.w.get(), out, stream, true,
                                      RopeSplitRows::kQueries).ok);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    ExpectSameBits(q2.Get(), q1.Get());
    ExpectSameBits(k2.Get(), k1.Get());
    ExpectSameBits(v2.Get(), v1.Get());
  }
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
  Dev<uint16_t> act(std::vector<uint16_t>(4));
  EXPECT_FALSE(GemvBf16SwiGluCuda(xf.get(), nullptr, 1e-5f, 8200, w.get(), 1, act.get(), nullptr).ok);
  EXPECT_FALSE(GemvBf16SwiGluCuda(xf.get(), nullptr, 1e-5f, 16, w.get(), 1, nullptr, nullptr).ok);
  GemvRopeSplitOut odd;  // an odd head_dim has no RoPE pairs
  odd.num_heads = odd.num_kv_heads = 1;
  odd.head_dim = 3;
  Dev<int64_t> pos(std::vector<int64_t>{0});
  odd.position = pos.get();
  odd.q = odd.k = odd.v = y.get();
  EXPECT_FALSE(GemvBf16RopeSplitCuda(xf.get(), nullptr, 1e-5f, 16, w.get(), odd, nullptr).ok);
  odd.head_dim = 2;
  odd.position = nullptr;
  EXPECT_FALSE(GemvBf16RopeSplitCuda(xf.get(), nullptr, 1e-5f, 16, w.get(), odd, nullptr).ok);
}

}  // namespace
}  // namespace witcert
