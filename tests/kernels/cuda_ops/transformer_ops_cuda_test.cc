// Each CUDA op against its CPU reference (kernels/cpu/transformer_ops.h) on random inputs
// over several shapes. Tolerances: fp32 outputs 1e-5 relative to the row's scale (fp32 vs
// the CPU's double accumulation: a few ulp per element, 1e-5 leaves two decades of room for
// dims up to 8192); bf16 outputs 2^-8 relative (one bf16 rounding is ≤ 2^-9).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/transformer_ops.h"
#include "kernels/cuda/ops/transformer_ops_cuda.h"
#include "tests/kernels/cuda_ops/ops_test_util.h"

namespace witcert {
namespace {

using testing::Dev;
using testing::RandomFloats;

float Bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t TruncBf16(float f) {  // any bf16 value: the test only needs representable inputs
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

TEST(CudaOpsTest, EmbeddingMatchesCpuLookupAndNaNsOutOfRange) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 97, hidden = 192;
  std::vector<uint16_t> table(vocab * hidden);
  std::vector<float> r = RandomFloats(table.size(), 1);
  for (size_t i = 0; i < table.size(); ++i) table[i] = TruncBf16(r[i]);
  QuantMatrix qm{GgmlType::kBF16, vocab, hidden, static_cast<size_t>(hidden) * 2,
                 reinterpret_cast<const uint8_t*>(table.data())};
  std::vector<int32_t> ids = {0, 96, 5, 5, 97, -1};
  Dev<uint16_t> dt(table);
  Dev<int32_t> di(ids);
  Dev<float> out(ids.size() * hidden);
  EXPECT_KERNEL_OK(EmbeddingCuda(dt.get(), vocab, hidden, di.get(), ids.size(), out.get(), 0));
  std::vector<float> got = out.Get(), want(hidden);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      for (int64_t j = 0; j < hidden; ++j) EXPECT_TRUE(std::isnan(got[i * hidden + j]));
      continue;
    }
    EmbeddingLookup(qm, ids[i], want.data());
    for (int64_t j = 0; j < hidden; ++j) ASSERT_EQ(got[i * hidden + j], want[j]) << i << "," << j;
  }
}

TEST(CudaOpsTest, RmsNormMatchesCpuInF32AndBf16) {
  SKIP_WITHOUT_GPU();
  // Vectorized path (dim % 4 == 0, up to 8192) at 2, 4 and 8 float4s per thread, a ragged
  // last float4 column, then the scalar path (odd dim, dim > 8192).
  for (auto [n, dim] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 64}, {7, 576}, {3, 4096}, {1, 8192}, {2, 4100}, {2, 90}, {1, 12288}}) {
    std::vector<float> x = RandomFloats(n * dim, 2 + n, -3, 3);
    std::vector<float> w = RandomFloats(dim, 3, 0.5f, 1.5f);
    std::vector<float> want(n * dim);
    RmsNorm(x.data(), w.data(), n, dim, 1e-5f, want.data());
    Dev<float> dx(x), dw(w), of(n * dim);
    Dev<uint16_t> ob(n * dim);
    EXPECT_KERNEL_OK(RmsNormCuda(dx.get(), dw.get(), n, dim, 1e-5f, of.get(), ob.get(), 0));
    std::vector<float> got = of.Get();
    std::vector<uint16_t> got_bf = ob.Get();
    for (int64_t i = 0; i < n * dim; ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << n << "x" << dim << " @" << i;
      ASSERT_NEAR(Bf16ToFloat(got_bf[i]), want[i], std::ldexp(1.0f, -8) * std::fabs(want[i]) + 1e-6f);
    }
  }
}

TEST(CudaOpsTest, RopeMatchesCpuBothPairingsAndLargePositions) {
  SKIP_WITHOUT_GPU();
  for (bool interleaved : {true, false}) {
    for (int32_t d : {64, 128}) {
      const int32_t heads = 3;
      const int64_t stride = heads * d + 40;  // rows wider than the heads: stride honoured
      const std::vector<int64_t> pos = {0, 1, 17, 4095, 100000, 131071};
      const int64_t n = pos.size();
      std::vector<float> x = RandomFloats(n * stride, 7 + d);
      std::vector<float> want = x;
      for (int64_t i = 0; i < n; ++i) {
        ApplyRope(&want[i * stride], heads, d, pos[i], 500000.0f, interleaved);
      }
      Dev<float> dx(x);
      Dev<int64_t> dp(pos);
      EXPECT_KERNEL_OK(RopeCuda(dx.get(), n, stride, heads, d, dp.get(), 500000.0f, interleaved, 0));
      std::vector<float> got = dx.Get();
      // Same double angles, float cos/sin: one rounding each plus the rotation (≤ 4 ulp of 2).
      for (int64_t e = 0; e < n * stride; ++e) {
        ASSERT_NEAR(got[e], want[e], 2e-6f) << "interleaved " << interleaved << " d " << d << " @" << e;
      }
    }
  }
}

// Qwen3's q/k norm: every q head and every k head of each row RMS-normed with its own weight,
// against the CPU's RmsNorm over rows of head_dim; v and the row padding are not touched.
TEST(CudaOpsTest, QkNormMatchesCpuPerHead) {
  SKIP_WITHOUT_GPU();
  for (int32_t d : {64, 128}) {
    const int32_t hq = 6, hkv = 2;
    const int64_t n = 5, q_dim = hq * d, kv_dim = hkv * d, stride = q_dim + 2 * kv_dim + 4;
    const std::vector<float> x = RandomFloats(n * stride, 41 + d);
    const std::vector<float> qw = RandomFloats(d, 43), kw = RandomFloats(d, 47);
    std::vector<float> want = x;
    for (int64_t i = 0; i < n; ++i) {
      RmsNorm(&want[i * stride], qw.data(), hq, d, 1e-6f, &want[i * stride]);
      RmsNorm(&want[i * stride + q_dim], kw.data(), hkv, d, 1e-6f, &want[i * stride + q_dim]);
    }
    Dev<float> dx(x), dqw(qw), dkw(kw);
    EXPECT_KERNEL_OK(QkNormCuda(dx.get(), n, stride, hq, hkv, d, dqw.get(), dkw.get(), 1e-6f, 0));
    const std::vector<float> got = dx.Get();
    for (int64_t e = 0; e < n * stride; ++e) {
      const int64_t col = e % stride;
      if (col >= q_dim + kv_dim) {
        ASSERT_EQ(got[e], x[e]) << "d " << d << " untouched @" << e;
      } else {
        ASSERT_NEAR(got[e], want[e], 2e-6f * (1.0f + std::fabs(want[e]))) << "d " << d << " @" << e;
      }
    }
  }
  EXPECT_FALSE(QkNormCuda(nullptr, 1, 10, 2, 1, 64, nullptr, nullptr, 1e-6f, 0).ok);
}

// RoPE scaling on the GPU: per-pair divisors (1 … 7.3 across the pairs, the span of llama3's
// and yarn's) and yarn's factor on cos and sin, against the CPU's ApplyRope with the same factors, and the fused split with them
// against RopeCuda's bits (so the backend's fused paths carry the scaling too).
TEST(CudaOpsTest, RopeWithFrequencyFactorsMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int32_t d = 128, heads = 3;
  std::vector<float> factors(d / 2);
  for (int32_t i = 0; i < d / 2; ++i) factors[i] = 1.0f + 0.1f * static_cast<float>(i);
  Dev<float> dfactors(factors);
  for (float attn : {1.0f, 1.1386294f}) {
    for (bool interleaved : {true, false}) {
      const int64_t stride = heads * d + 8;
      const std::vector<int64_t> pos = {0, 1, 17, 4095, 100000, 131071};
      const int64_t n = pos.size();
      const std::vector<float> x = RandomFloats(n * stride, 29);
      std::vector<float> want = x;
      for (int64_t i = 0; i < n; ++i) {
        ApplyRope(&want[i * stride], heads, d, pos[i], 500000.0f, interleaved, factors.data(), attn);
      }
      Dev<float> dx(x);
      Dev<int64_t> dp(pos);
      const cuda_ops::RopeFreq freq(500000.0f, dfactors.get(), attn);
      EXPECT_KERNEL_OK(RopeCuda(dx.get(), n, stride, heads, d, dp.get(), freq, interleaved, 0));
      const std::vector<float> got = dx.Get();
      double moved = 0.0;  // how far the scaling moves the result: the check must mean something
      std::vector<float> plain = x;
      for (int64_t i = 0; i < n; ++i) ApplyRope(&plain[i * stride], heads, d, pos[i], 500000.0f, interleaved);
      for (int64_t e = 0; e < n * stride; ++e) {
        ASSERT_NEAR(got[e], want[e], 3e-6f) << "attn " << attn << " interleaved " << interleaved << " @" << e;
        moved = std::max(moved, std::fabs(double(want[e]) - plain[e]));
      }
      EXPECT_GT(moved, 0.1);

      // The fused split with the same frequencies: RopeCuda's bits.
      const int32_t hq = 2, hkv = 1;
      const int64_t q_dim = hq * d, kv_dim = hkv * d, fstride = q_dim + 2 * kv_dim;
      const std::vector<float> fx = RandomFloats(n * fstride, 31);
      Dev<float> rotated(fx);
      EXPECT_KERNEL_OK(RopeCuda(rotated.get(), n, fstride, hq + hkv, d, dp.get(), freq, interleaved, 0));
      const std::vector<float> rot = rotated.Get();
      Dev<float> fused(fx), q(std::vector<float>(n * q_dim, NAN)), k(std::vector<float>(n * kv_dim, NAN)),
          v(std::vector<float>(n * kv_dim, NAN));
      EXPECT_KERNEL_OK(RopeSplitQkvCuda(fused.get(), n, fstride, hq, hkv, d, dp.get(), freq, interleaved,
                                        q.get(), k.get(), v.get(), 0));
      const std::vector<float> gq = q.Get(), gk = k.Get();
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < q_dim; ++j) ASSERT_EQ(gq[i * q_dim + j], rot[i * fstride + j]) << i << " q " << j;
        for (int64_t j = 0; j < kv_dim; ++j) ASSERT_EQ(gk[i * kv_dim + j], rot[i * fstride + q_dim + j]) << i << " k " << j;
      }
    }
  }
}

// The fused split: bitwise what RopeCuda on the fused rows plus three strided copies give
// (the backend's old sequence), for both pairings, GQA and padded rows.
TEST(CudaOpsTest, RopeSplitQkvEqualsRopeThenCopies) {
  SKIP_WITHOUT_GPU();
  for (bool interleaved : {true, false}) {
    for (int32_t d : {64, 128}) {
      const int32_t hq = 6, hkv = 2;
      const int64_t q_dim = hq * d, kv_dim = hkv * d, stride = q_dim + 2 * kv_dim + 8;
      const std::vector<int64_t> pos = {0, 3, 4095, 131071, 77};
      const int64_t n = pos.size();
      const std::vector<float> x = RandomFloats(n * stride, 11 + d);
      Dev<float> rotated(x);
      Dev<int64_t> dp(pos);
      EXPECT_KERNEL_OK(RopeCuda(rotated.get(), n, stride, hq, d, dp.get(), 1e6f, interleaved, 0));
      EXPECT_KERNEL_OK(RopeCuda(rotated.get() + q_dim, n, stride, hkv, d, dp.get(), 1e6f, interleaved, 0));
      const std::vector<float> want = rotated.Get();
      Dev<float> fused(x), q(std::vector<float>(n * q_dim, NAN)), k(std::vector<float>(n * kv_dim, NAN)),
          v(std::vector<float>(n * kv_dim, NAN));
      EXPECT_KERNEL_OK(RopeSplitQkvCuda(fused.get(), n, stride, hq, hkv, d, dp.get(), 1e6f, interleaved,
                                        q.get(), k.get(), v.get(), 0));
      const std::vector<float> gq = q.Get(), gk = k.Get(), gv = v.Get();
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < q_dim; ++j) ASSERT_EQ(gq[i * q_dim + j], want[i * stride + j]) << i << " q " << j;
        for (int64_t j = 0; j < kv_dim; ++j) {
          ASSERT_EQ(gk[i * kv_dim + j], want[i * stride + q_dim + j]) << i << " k " << j;
          ASSERT_EQ(gv[i * kv_dim + j], x[i * stride + q_dim + kv_dim + j]) << i << " v " << j;
        }
      }
      EXPECT_EQ(fused.Get(), x);  // the fused rows are read, not written
    }
  }
  EXPECT_FALSE(RopeSplitQkvCuda(nullptr, 1, 10, 2, 1, 64, nullptr, 1e4f, true, nullptr, nullptr, nullptr, 0).ok);
}

TEST(CudaOpsTest, SwiGluMatchesCpuOnFusedHalves) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 5, cols = 1536;
  std::vector<float> gu = RandomFloats(n * 2 * cols, 11, -6, 6);
  std::vector<float> want(n * cols);
  for (int64_t i = 0; i < n; ++i) {
    SwiGlu(&gu[i * 2 * cols], &gu[i * 2 * cols + cols], cols, &want[i * cols]);
  }
  Dev<float> dg(gu), of(n * cols);
  Dev<uint16_t> ob(n * cols);
  EXPECT_KERNEL_OK(SwiGluCuda(dg.get(), dg.get() + cols, n, cols, 2 * cols, of.get(), ob.get(), 0));
  std::vector<float> got = of.Get();
  std::vector<uint16_t> got_bf = ob.Get();
  for (int64_t e = 0; e < n * cols; ++e) {
    ASSERT_NEAR(got[e], want[e], 1e-5f * (1.0f + std::fabs(want[e])));
    ASSERT_NEAR(Bf16ToFloat(got_bf[e]), want[e], std::ldexp(1.0f, -8) * std::fabs(want[e]) + 1e-6f);
  }
}

TEST(CudaOpsTest, ResidualAndBiasAddsAreExact) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 9, cols = 300, stride = 320;
  std::vector<float> y = RandomFloats(n * stride, 21), x = RandomFloats(n * stride, 22);
  std::vector<float> bias = RandomFloats(cols, 23);
  std::vector<float> want = y;
  AddInPlace(want.data(), x.data(), n * stride);
  for (int64_t i = 0; i < n; ++i) AddInPlace(&want[i * stride], bias.data(), cols);
  Dev<float> dy(y), dx(x), db(bias);
  EXPECT_KERNEL_OK(AddInPlaceCuda(dy.get(), dx.get(), n * stride, 0));
  EXPECT_KERNEL_OK(AddBiasRowsCuda(dy.get(), n, cols, stride, db.get(), 0));
  EXPECT_EQ(dy.Get(), want);  // one fp32 add per element in the same order: bit-exact
}

TEST(CudaOpsTest, Bf16ConversionRoundsToNearestEven) {
  SKIP_WITHOUT_GPU();
  std::vector<float> x = RandomFloats(4099, 31, -100, 100);
  x[0] = 1.0f + std::ldexp(1.0f, -8);  // exact tie: rounds to even (1.0)
  x[1] = 1.0f + 3 * std::ldexp(1.0f, -8);  // tie: rounds up to 1 + 2^-6
  Dev<float> dx(x);
  Dev<uint16_t> out(x.size());
  EXPECT_KERNEL_OK(FloatToBf16Cuda(dx.get(), x.size(), out.get(), 0));
  std::vector<uint16_t> got = out.Get();
  EXPECT_EQ(Bf16ToFloat(got[0]), 1.0f);
  EXPECT_EQ(Bf16ToFloat(got[1]), 1.0f + std::ldexp(1.0f, -6));
  for (size_t i = 2; i < x.size(); ++i) {
    // Half a bf16 ulp: 2^(e-8) for |x| in [2^e, 2^(e+1)), so ≤ 2^-8 · |x|.
    ASSERT_LE(std::fabs(Bf16ToFloat(got[i]) - x[i]), std::ldexp(1.0f, -8) * std::fabs(x[i]));
  }
}

TEST(CudaOpsTest, RowNormsMatchDoubleReference) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 37;
  const int32_t dim = 128;
  std::vector<float> x = RandomFloats(n * dim, 41);
  Dev<float> dx(x), out(n);
  EXPECT_KERNEL_OK(RowNormsCuda(dx.get(), n, dim, out.get(), 0));
  std::vector<float> got = out.Get();
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int32_t j = 0; j < dim; ++j) ss += double{x[i * dim + j]} * x[i * dim + j];
    ASSERT_NEAR(got[i], std::sqrt(ss), 1e-5 * std::sqrt(ss));
  }
}

TEST(CudaOpsTest, ArgmaxPicksFirstMaximumAndSkipsNaN) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 49152;
  std::vector<float> logits = RandomFloats(4 * vocab, 51, -10, 10);
  logits[0 * vocab + 40000] = 50.0f;             // row 0: a clear maximum late in the row
  logits[1 * vocab + 300] = 60.0f;               // row 1: a tie, the first index wins
  logits[1 * vocab + 20000] = 60.0f;
  logits[2 * vocab + 7] = std::nanf("");         // row 2: NaN never chosen
  logits[2 * vocab + 9] = 70.0f;
  for (int64_t j = 0; j < vocab; ++j) logits[3 * vocab + j] = std::nanf("");  // row 3: all NaN
  Dev<float> dl(logits);
  Dev<int32_t> out(4);
  EXPECT_KERNEL_OK(ArgmaxRowsCuda(dl.get(), 4, vocab, out.get(), 0));
  EXPECT_EQ(out.Get(), (std::vector<int32_t>{40000, 300, 9, 0}));
}

}  // namespace
}  // namespace witcert
