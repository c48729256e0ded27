#include "tests/kernels/cuda/mma_rounding_cuda.h"

#include <cuda_runtime.h>

#include "kernels/cuda/ops/mma_f16.cuh"

namespace witcert::testing {
namespace {

// One warp per tile; each lane gathers its fragments from the row-major tiles (layouts in
// ops/mma_f16.cuh: g = lane / 4, t = lane % 4).
__global__ void MmaTilesKernel(bool bf16, const uint16_t* a, const uint16_t* b, const float* c, int64_t tiles,
                               float* d) {
  const int64_t tile = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (tile >= tiles) return;
  const int lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
  const uint16_t* at = a + tile * 256;
  const uint16_t* bt = b + tile * 128;
  auto pair = [](uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); };
  const uint32_t af[4] = {pair(at[g * 16 + 2 * t], at[g * 16 + 2 * t + 1]),
                          pair(at[(g + 8) * 16 + 2 * t], at[(g + 8) * 16 + 2 * t + 1]),
                          pair(at[g * 16 + 2 * t + 8], at[g * 16 + 2 * t + 9]),
                          pair(at[(g + 8) * 16 + 2 * t + 8], at[(g + 8) * 16 + 2 * t + 9])};
  const uint32_t b0 = pair(bt[(2 * t) * 8 + g], bt[(2 * t + 1) * 8 + g]);
  const uint32_t b1 = pair(bt[(2 * t + 8) * 8 + g], bt[(2 * t + 9) * 8 + g]);
  const float* ct = c + tile * 128;
  float acc[4] = {ct[g * 8 + 2 * t], ct[g * 8 + 2 * t + 1], ct[(g + 8) * 8 + 2 * t], ct[(g + 8) * 8 + 2 * t + 1]};
  if (bf16) {
    mma::Mma16F32<true>(acc, af, b0, b1);
  } else {
    mma::Mma16F32<false>(acc, af, b0, b1);
  }
  float* dt = d + tile * 128;
  dt[g * 8 + 2 * t] = acc[0];
  dt[g * 8 + 2 * t + 1] = acc[1];
  dt[(g + 8) * 8 + 2 * t] = acc[2];
  dt[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

template <class T>
struct DevArray {
  T* p = nullptr;
  ~DevArray() { if (p) cudaFree(p); }
  cudaError_t Alloc(size_t n) { return cudaMalloc(&p, n * sizeof(T)); }
};

}  // namespace

CudaStatus MmaTilesCuda(bool bf16, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                        const std::vector<float>& c, int64_t tiles, std::vector<float>* d) {
  if (a.size() != static_cast<size_t>(tiles) * 256 || b.size() != static_cast<size_t>(tiles) * 128 ||
      c.size() != static_cast<size_t>(tiles) * 128) {
    return CudaStatus::Error("MmaTilesCuda: operand sizes do not match the tile count");
  }
  DevArray<uint16_t> da, db;
  DevArray<float> dc, dd;
  WITCERT_CUDA_CALL(da.Alloc(a.size()));
  WITCERT_CUDA_CALL(db.Alloc(b.size()));
  WITCERT_CUDA_CALL(dc.Alloc(c.size()));
  WITCERT_CUDA_CALL(dd.Alloc(c.size()));
  WITCERT_CUDA_CALL(cudaMemcpy(da.p, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  WITCERT_CUDA_CALL(cudaMemcpy(db.p, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  WITCERT_CUDA_CALL(cudaMemcpy(dc.p, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
  const int threads = 256;
  const int64_t blocks = (tiles * 32 + threads - 1) / threads;
  MmaTilesKernel<<<static_cast<unsigned>(blocks), threads>>>(bf16, da.p, db.p, dc.p, tiles, dd.p);
  WITCERT_CUDA_CALL(cudaGetLastError());
  d->resize(c.size());
  WITCERT_CUDA_CALL(cudaMemcpy(d->data(), dd.p, c.size() * 4, cudaMemcpyDeviceToHost));
  return CudaStatus::Ok();
}

}  // namespace witcert::testing
