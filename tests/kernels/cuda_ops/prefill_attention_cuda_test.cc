// The causal prefill attention kernel against a double-precision evaluation of the CPU
// backend's FreshCausalAttention math, over chunk lengths that cross the kernel's 32-key
// tiles, GQA groups 1..4 and head_dim 64/128 with strided rows. Tolerance 2e-5 absolute on
// outputs of size O(1) (fp32 online softmax: a handful of ulp per rescale).
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/ops/prefill_attention_cuda.h"
#include "tests/kernels/cuda_ops/ops_test_util.h"

namespace witcert {
namespace {

using testing::Dev;
using testing::RandomFloats;

std::vector<float> Reference(const std::vector<float>& q, int64_t q_stride,
                             const std::vector<float>& k, const std::vector<float>& v,
                             int64_t kv_stride, int64_t n, int32_t hq, int32_t hkv, int32_t d) {
  std::vector<float> out(n * hq * d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t i = 0; i < n; ++i) {
    for (int32_t h = 0; h < hq; ++h) {
      const int32_t g = h / (hq / hkv);
      std::vector<double> s(i + 1);
      double mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int32_t c = 0; c < d; ++c) dot += double{q[i * q_stride + h * d + c]} * k[j * kv_stride + g * d + c];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      for (double& e : s) z += (e = std::exp(e - mx));
      for (int32_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += s[j] * v[j * kv_stride + g * d + c];
        out[(i * hq + h) * d + c] = static_cast<float>(acc / z);
      }
    }
  }
  return out;
}

TEST(PrefillAttentionCudaTest, MatchesDoubleReference) {
  SKIP_WITHOUT_GPU();
  struct Shape { int64_t n; int32_t hq, hkv, d; };
  for (Shape sh : {Shape{1, 4, 4, 64}, Shape{31, 9, 3, 64}, Shape{33, 8, 2, 128},
                   Shape{130, 32, 8, 128}}) {
    const int64_t q_stride = sh.hq * sh.d + 2 * sh.hkv * sh.d;  // like a fused QKV row
    const int64_t kv_stride = sh.hkv * sh.d + 16;
    std::vector<float> q = RandomFloats(sh.n * q_stride, 61 + sh.n, -1.5f, 1.5f);
    std::vector<float> k = RandomFloats(sh.n * kv_stride, 62 + sh.n, -1.5f, 1.5f);
    std::vector<float> v = RandomFloats(sh.n * kv_stride, 63 + sh.n);
    std::vector<float> want = Reference(q, q_stride, k, v, kv_stride, sh.n, sh.hq, sh.hkv, sh.d);
    Dev<float> dq(q), dk(k), dv(v), out(sh.n * sh.hq * sh.d);
    EXPECT_KERNEL_OK(PrefillAttentionCuda(dq.get(), q_stride, dk.get(), dv.get(), kv_stride, sh.n,
                                          sh.hq, sh.hkv, sh.d, out.get(), sh.hq * sh.d, 0));
    std::vector<float> got = out.Get();
    for (size_t e = 0; e < got.size(); ++e) {
      ASSERT_NEAR(got[e], want[e], 2e-5f) << "n " << sh.n << " hq " << sh.hq << " d " << sh.d << " @" << e;
    }
  }
}

TEST(PrefillAttentionCudaTest, RejectsUnsupportedShapes) {
  SKIP_WITHOUT_GPU();
  EXPECT_FALSE(PrefillAttentionCuda(nullptr, 0, nullptr, nullptr, 0, 4, 4, 4, 48, nullptr, 0, 0).ok);
  EXPECT_FALSE(PrefillAttentionCuda(nullptr, 0, nullptr, nullptr, 0, 4, 6, 4, 64, nullptr, 0, 0).ok);
}

}  // namespace
}  // namespace witcert
