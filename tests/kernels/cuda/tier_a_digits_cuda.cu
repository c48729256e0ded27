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

}  // namespace witcert::testing
