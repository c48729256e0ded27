// The causal prefill attention kernels against a double-precision evaluation of the CPU
// backend's FreshCausalAttention math, with strided rows like a fused QKV buffer.
//
// Both paths are held to their own stated bound (prefill_attention_cuda.h), element-wise,
// NaN counted as a failure: the exact fp32 kernel 2e-5 absolute, the fp16 tensor-core kernel
// 2e-3 absolute, on outputs of size O(1) (|q|, |k| ≤ 1.5, |v| ≤ 2); the tensor-core kernel
// in both its configurations (16 and 32 rows per warp) and as its default picks. Chunk
// lengths cross its 128- and 256-row query tiles and 64-key tiles (1 .. 2048),
// and the models' shapes: SmolLM2 (d 64, Hq 9 / Hkv 3), Llama-3.1-8B (d 128, 32 / 8), MHA
// (d 128, 8 / 8), and a group of 4 on one KV head at 2048. The output has padded rows whose
// padding must stay untouched. Each check prints its measured max error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/ops/prefill_attention_cuda.h"
#include "kernels/cuda/ops/prefill_attention_paths.h"
#include "tests/kernels/cuda_ops/ops_test_util.h"

namespace witcert {
namespace {

using testing::Dev;
using testing::RandomFloats;

constexpr float kFp32Tolerance = 2e-5f;
constexpr float kMmaTolerance = 2e-3f;

// out [n, hq * d] (dense), in double, cast to float at the end.
std::vector<float> Reference(const std::vector<float>& q, int64_t q_stride,
                             const std::vector<float>& k, const std::vector<float>& v,
                             int64_t kv_stride, int64_t n, int32_t hq, int32_t hkv, int32_t d) {
  std::vector<float> out(n * hq * d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> s(n), acc(d);
  for (int64_t i = 0; i < n; ++i) {
    for (int32_t h = 0; h < hq; ++h) {
      const int32_t g = h / (hq / hkv);
      double mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int32_t c = 0; c < d; ++c) {
          dot += double{q[i * q_stride + h * d + c]} * k[j * kv_stride + g * d + c];
        }
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        const double p = std::exp(s[j] - mx);
        z += p;
        for (int32_t c = 0; c < d; ++c) acc[c] += p * v[j * kv_stride + g * d + c];
      }
      for (int32_t c = 0; c < d; ++c) out[(i * hq + h) * d + c] = static_cast<float>(acc[c] / z);
    }
  }
  return out;
}

struct Shape {
  int64_t n;
  int32_t hq, hkv, d;
};

std::string Describe(const Shape& sh) {
  return "n " + std::to_string(sh.n) + " hq " + std::to_string(sh.hq) + " hkv " +
         std::to_string(sh.hkv) + " d " + std::to_string(sh.d);
}

// Random inputs at fused-QKV-like strides and their double reference.
struct Problem {
  Shape shape;
  int64_t q_stride, kv_stride;
  std::vector<float> q, k, v;  // [n, q_stride], [n, kv_stride], [n, kv_stride]
  std::vector<float> want;     // [n, hq * d]

  Problem(Shape sh, int64_t kv_pad = 16) : shape(sh) {
    q_stride = sh.hq * sh.d + 2 * sh.hkv * sh.d;
    kv_stride = sh.hkv * sh.d + kv_pad;
    q = RandomFloats(sh.n * q_stride, 61 + sh.n + sh.d, -1.5f, 1.5f);
    k = RandomFloats(sh.n * kv_stride, 62 + sh.n + sh.hq, -1.5f, 1.5f);
    v = RandomFloats(sh.n * kv_stride, 63 + sh.n + sh.hkv);
    want = Reference(q, q_stride, k, v, kv_stride, sh.n, sh.hq, sh.hkv, sh.d);
  }
};

using AttentionFn = CudaStatus (*)(const float*, int64_t, const float*, const float*, int64_t,
                                   int64_t, int32_t, int32_t, int32_t, float*, int64_t,
                                   cudaStream_t);

// Runs `fn` into an out buffer with 6 poisoned padding floats per row; every element within
// `tolerance` of the reference (NaN fails), padding untouched. Returns the max abs error.
float RunAndCompare(const char* path, AttentionFn fn, const Problem& pb, float tolerance) {
  const Shape& sh = pb.shape;
  const int64_t width = int64_t{sh.hq} * sh.d;
  const int64_t out_stride = width + 6;
  Dev<float> dq(pb.q), dk(pb.k), dv(pb.v), out(sh.n * out_stride);  // poisoned
  const CudaStatus st = fn(dq.get(), pb.q_stride, dk.get(), dv.get(), pb.kv_stride, sh.n, sh.hq,
                           sh.hkv, sh.d, out.get(), out_stride, 0);
  EXPECT_TRUE(st.ok) << path << " " << Describe(sh) << ": " << st.message;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = out.Get();
  float poison;  // Dev's fill: every byte 0x7f
  const uint32_t poison_bits = 0x7f7f7f7fu;
  std::memcpy(&poison, &poison_bits, sizeof(poison));
  float max_err = 0;
  int64_t violations = 0, first_bad = -1, padding_touched = 0;
  for (int64_t i = 0; i < sh.n; ++i) {
    for (int64_t c = 0; c < out_stride; ++c) {
      const float x = got[i * out_stride + c];
      if (c >= width) {
        padding_touched += x != poison;
        continue;
      }
      const float err = std::fabs(x - pb.want[i * width + c]);
      if (!(err <= tolerance)) {  // NaN too
        if (first_bad < 0) first_bad = i * width + c;
        ++violations;
      }
      if (!(err <= max_err)) max_err = err;
    }
  }
  std::printf("[ measured ] %-5s %-26s max abs error %.3g (bound %.0e)\n", path,
              Describe(sh).c_str(), max_err, tolerance);
  EXPECT_EQ(violations, 0) << path << " " << Describe(sh) << ": max error " << max_err
                           << ", first bad element " << first_bad << " got "
                           << (first_bad >= 0
                                   ? got[first_bad / width * out_stride + first_bad % width]
                                   : 0.0f)
                           << " want " << (first_bad >= 0 ? pb.want[first_bad] : 0.0f);
  EXPECT_EQ(padding_touched, 0) << path << " " << Describe(sh) << " wrote past a row";
  return max_err;
}

CudaStatus Mma16RowsPerWarp(const float* q, int64_t q_stride, const float* k, const float* v,
                            int64_t kv_stride, int64_t n, int32_t hq, int32_t hkv, int32_t d,
                            float* out, int64_t out_stride, cudaStream_t stream) {
  return PrefillAttentionMmaCudaRows(16, q, q_stride, k, v, kv_stride, n, hq, hkv, d, out,
                                     out_stride, stream);
}
CudaStatus Mma32RowsPerWarp(const float* q, int64_t q_stride, const float* k, const float* v,
                            int64_t kv_stride, int64_t n, int32_t hq, int32_t hkv, int32_t d,
                            float* out, int64_t out_stride, cudaStream_t stream) {
  return PrefillAttentionMmaCudaRows(32, q, q_stride, k, v, kv_stride, n, hq, hkv, d, out,
                                     out_stride, stream);
}

void CheckBothPaths(const Shape& sh) {
  const Problem pb(sh);
  RunAndCompare("mma", PrefillAttentionMmaCuda, pb, kMmaTolerance);
  RunAndCompare("mma16", Mma16RowsPerWarp, pb, kMmaTolerance);
  RunAndCompare("mma32", Mma32RowsPerWarp, pb, kMmaTolerance);
  RunAndCompare("fp32", PrefillAttentionFp32Cuda, pb, kFp32Tolerance);
}

TEST(PrefillAttentionCudaTest, MatchesDoubleReferenceOnTheChosenPath) {
  SKIP_WITHOUT_GPU();
  for (Shape sh : {Shape{1, 4, 4, 64}, Shape{31, 9, 3, 64}, Shape{33, 8, 2, 128},
                   Shape{130, 32, 8, 128}, Shape{300, 16, 2, 64}}) {  // the last: a group of 8
    const Problem pb(sh);
    RunAndCompare("auto", PrefillAttentionCuda, pb, kMmaTolerance);  // d 64/128: tensor cores
  }
}

TEST(PrefillAttentionCudaTest, BothPathsMatchDoubleReferenceD64) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 17, 64, 65, 200, 1000}) CheckBothPaths(Shape{n, 9, 3, 64});
}

TEST(PrefillAttentionCudaTest, BothPathsMatchDoubleReferenceD128) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 17, 64, 65, 200, 1000}) {
    CheckBothPaths(Shape{n, 32, 8, 128});
    CheckBothPaths(Shape{n, 8, 8, 128});
  }
}

TEST(PrefillAttentionCudaTest, BothPathsMatchDoubleReferenceLongChunk) {
  SKIP_WITHOUT_GPU();
  CheckBothPaths(Shape{2048, 4, 1, 128});  // full reference: every row of 16 query tiles
}

// Head dims without a tensor-core kernel and rows that are not float4-aligned take the exact
// path through the public entry point: the fp32 bound holds there.
TEST(PrefillAttentionCudaTest, OtherShapesTakeTheExactPath) {
  SKIP_WITHOUT_GPU();
  for (Shape sh : {Shape{70, 6, 2, 96}, Shape{40, 2, 1, 256}, Shape{33, 4, 2, 32}}) {
    const Problem pb(sh);
    EXPECT_FALSE(PrefillAttentionMmaSupports(nullptr, pb.q_stride, nullptr, nullptr, pb.kv_stride,
                                             sh.n, sh.d, nullptr, sh.hq * sh.d));
    RunAndCompare("auto", PrefillAttentionCuda, pb, kFp32Tolerance);
  }
  const Problem odd_kv(Shape{65, 8, 2, 128}, /*kv_pad=*/1);
  EXPECT_FALSE(PrefillAttentionMmaSupports(nullptr, odd_kv.q_stride, nullptr, nullptr,
                                           odd_kv.kv_stride, 65, 128, nullptr, 8 * 128));
  RunAndCompare("auto", PrefillAttentionCuda, odd_kv, kFp32Tolerance);
}

TEST(PrefillAttentionCudaTest, RejectsUnsupportedShapes) {
  SKIP_WITHOUT_GPU();
  EXPECT_FALSE(
      PrefillAttentionCuda(nullptr, 0, nullptr, nullptr, 0, 4, 4, 4, 48, nullptr, 0, 0).ok);
  EXPECT_FALSE(
      PrefillAttentionCuda(nullptr, 0, nullptr, nullptr, 0, 4, 6, 4, 64, nullptr, 0, 0).ok);
  EXPECT_FALSE(
      PrefillAttentionMmaCuda(nullptr, 0, nullptr, nullptr, 0, 4, 4, 4, 96, nullptr, 0, 0).ok);
  EXPECT_FALSE(
      PrefillAttentionMmaCuda(nullptr, 0, nullptr, nullptr, 0, 4, 6, 4, 64, nullptr, 0, 0).ok);
}

}  // namespace
}  // namespace witcert
