#include "tests/kernels/cuda/tier_a_digits_cuda.h"

#include <cuda_runtime.h>

#include "kernels/cuda/tier_a_digits.cuh"

namespace witcert::testing {
namespace {

// Warp: 4 heads, lane g·8 + b holds band b of head g (the decode's band warp). The digits go to
// shared memory as the decode kernels store them (StoreBandFactorDigits); lane g·8 reads its
// head's back and computes every token's ε.
constexpr int kWarpsPerBlock = 4;
__global__ void TierAEpsilonKernel(const float* factors, const uint8_t* codes, const float* units, int64_t heads,
                                   int64_t tokens, float* eps) {
  __shared__ uint32_t digits[kWarpsPerBlock][4][4];  // [warp, head, band pair]
  __shared__ float scales[kWarpsPerBlock][4];
  const int lane = threadIdx.x & 31, w = threadIdx.x / 32, g = lane / 8, b = lane % 8;
  const int64_t head = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + w) * 4 + g;
  const float f = head < heads ? factors[head * 8 + b] : 0.0f;
  cuda_kv::StoreBandFactorDigits(cuda_kv::BandFactorDigitsOf(f, 8), b, digits[w][g], &scales[w][g]);
  __syncwarp();
  if (b != 0 || head >= heads) return;
  uint32_t q[4];
  for (int j = 0; j < 4; ++j) q[j] = digits[w][g][j];
  const float scale = scales[w][g];
  for (int64_t t = 0; t < tokens; ++t) {
    const uint8_t* c = codes + (head * tokens + t) * 8;
    uint2 kc;
    kc.x = c[0] | (c[1] << 8) | (c[2] << 16) | (static_cast<uint32_t>(c[3]) << 24);
    kc.y = c[4] | (c[5] << 8) | (c[6] << 16) | (static_cast<uint32_t>(c[7]) << 24);
    eps[head * tokens + t] = cuda_kv::TierAEpsilonOfDigits(q, kc, units[head * tokens + t], scale);
  }
}

// Warp: 16 rows (lane (g, t): rows g, g + 8), every token, 8 at a time (column n: token 8i + n).
__global__ void TierAEpsilonBothFormsKernel(const float* factors, const uint8_t* codes, const float* units,
                                            int64_t tokens, float* eps_dp2a, float* eps_mma) {
  const int lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16 + g;
  uint32_t q[2][4];
  float scale[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float f[8];
    for (int b = 0; b < 8; ++b) f[b] = factors[(row0 + 8 * r) * 8 + b];
    cuda_kv::BandFactorDigits8(f, q[r], &scale[r]);
  }
  cuda_kv::BandDigitFragments frag;
  frag.From(q[0], q[1], t);
  for (int64_t i = 0; i < tokens / 8; ++i) {
    const uint8_t* bc = codes + (8 * i + g) * 8 + 2 * t;
    float sums[4];
    cuda_kv::TierABandSumsMma(frag, cuda_kv::BandCodePairToF16x2(bc[0] | (bc[1] << 8)), sums);
    for (int e = 0; e < 4; ++e) {
      const int r = e / 2;
      const int64_t tok = 8 * i + 2 * t + (e & 1), row = row0 + 8 * r;
      const uint8_t* c = codes + tok * 8;
      uint2 kc;
      kc.x = c[0] | (c[1] << 8) | (c[2] << 16) | (static_cast<uint32_t>(c[3]) << 24);
      kc.y = c[4] | (c[5] << 8) | (c[6] << 16) | (static_cast<uint32_t>(c[7]) << 24);
      eps_dp2a[row * tokens + tok] = cuda_kv::TierAEpsilonOfDigits(q[r], kc, units[tok], scale[r]);
      eps_mma[row * tokens + tok] = __fmul_ru(__fmul_ru(sums[e], units[tok]), scale[r]);
    }
  }
}

template <class T>
T* Upload(const std::vector<T>& h) {
  T* p = nullptr;
  if (cudaMalloc(&p, h.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

}  // namespace

CudaStatus TierAEpsilonOfDigitsCuda(const std::vector<float>& factors, const std::vector<uint8_t>& codes,
                                    const std::vector<float>& units, int64_t tokens, std::vector<float>* eps) {
  const int64_t heads = static_cast<int64_t>(factors.size()) / 8;
  if (heads * 8 != static_cast<int64_t>(factors.size()) || static_cast<int64_t>(codes.size()) != heads * tokens * 8 ||
      static_cast<int64_t>(units.size()) != heads * tokens) {
    return CudaStatus::Error("TierAEpsilonOfDigitsCuda: sizes");
  }
  float* df = Upload(factors);
  uint8_t* dc = Upload(codes);
  float* du = Upload(units);
  float* de = nullptr;
  WITCERT_CUDA_CALL(cudaMalloc(&de, static_cast<size_t>(heads * tokens) * sizeof(float)));
  const int64_t warps = (heads + 3) / 4;
  TierAEpsilonKernel<<<static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock), 32 * kWarpsPerBlock>>>(
      df, dc, du, heads, tokens, de);
  WITCERT_CUDA_CALL(cudaGetLastError());
  eps->resize(static_cast<size_t>(heads * tokens));
  WITCERT_CUDA_CALL(cudaMemcpy(eps->data(), de, eps->size() * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(df);
  cudaFree(dc);
  cudaFree(du);
  cudaFree(de);
  return CudaStatus::Ok();
}

CudaStatus TierAEpsilonBothFormsCuda(const std::vector<float>& factors, const std::vector<uint8_t>& codes,
                                     const std::vector<float>& units, std::vector<float>* eps_dp2a,
                                     std::vector<float>* eps_mma) {
  const int64_t rows = static_cast<int64_t>(factors.size()) / 8, tokens = static_cast<int64_t>(units.size());
  if (rows * 8 != static_cast<int64_t>(factors.size()) || rows % 16 != 0 || tokens % 8 != 0 ||
      static_cast<int64_t>(codes.size()) != tokens * 8) {
    return CudaStatus::Error("TierAEpsilonBothFormsCuda: sizes");
  }
  float* df = Upload(factors);
  uint8_t* dc = Upload(codes);
  float* du = Upload(units);
  float *d1 = nullptr, *d2 = nullptr;
  const size_t n = static_cast<size_t>(rows * tokens);
  WITCERT_CUDA_CALL(cudaMalloc(&d1, n * sizeof(float)));
  WITCERT_CUDA_CALL(cudaMalloc(&d2, n * sizeof(float)));
  TierAEpsilonBothFormsKernel<<<static_cast<unsigned>(rows / 16), 32>>>(df, dc, du, tokens, d1, d2);
  WITCERT_CUDA_CALL(cudaGetLastError());
  eps_dp2a->resize(n);
  eps_mma->resize(n);
  WITCERT_CUDA_CALL(cudaMemcpy(eps_dp2a->data(), d1, n * sizeof(float), cudaMemcpyDeviceToHost));
  WITCERT_CUDA_CALL(cudaMemcpy(eps_mma->data(), d2, n * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(df);
  cudaFree(dc);
  cudaFree(du);
  cudaFree(d1);
  cudaFree(d2);
  return CudaStatus::Ok();
}

}  // namespace witcert::testing
