#include "kernels/cuda/ops/gemv_bf16_cuda.h"

#include <cstdint>

namespace witcert {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;          // 16-byte loads in flight per lane
constexpr int64_t kMaxCols = 24576; // 48 KB of bf16 x in shared memory

__device__ __forceinline__ float Lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float Hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

__device__ __forceinline__ float Dot8(const uint4 a, const uint4 b, float acc) {
  acc = fmaf(Lo(a.x), Lo(b.x), acc);
  acc = fmaf(Hi(a.x), Hi(b.x), acc);
  acc = fmaf(Lo(a.y), Lo(b.y), acc);
  acc = fmaf(Hi(a.y), Hi(b.y), acc);
  acc = fmaf(Lo(a.z), Lo(b.z), acc);
  acc = fmaf(Hi(a.z), Hi(b.z), acc);
  acc = fmaf(Lo(a.w), Lo(b.w), acc);
  acc = fmaf(Hi(a.w), Hi(b.w), acc);
  return acc;
}

__global__ void __launch_bounds__(kThreads) GemvBf16Kernel(const uint16_t* __restrict__ x,
                                                           int64_t cols,
                                                           const uint16_t* __restrict__ w,
                                                           int64_t rows, float* __restrict__ y,
                                                           float beta) {
  extern __shared__ uint4 xs[];  // [cols / 8]
  const int64_t c8 = cols / 8;
  const uint4* xg = reinterpret_cast<const uint4*>(x);
  for (int64_t i = threadIdx.x; i < c8; i += kThreads) xs[i] = xg[i];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= rows) return;
  const uint4* wr = reinterpret_cast<const uint4*>(w + row * cols);  // [cols / 8]
  float acc[kUnroll] = {};
  int64_t i = lane;
  for (; i + (kUnroll - 1) * 32 < c8; i += kUnroll * 32) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(wr + i + u * 32);  // streamed once
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc[u] = Dot8(wv[u], xs[i + u * 32], acc[u]);
  }
  for (; i < c8; i += 32) acc[0] = Dot8(__ldcs(wr + i), xs[i], acc[0]);
  float s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[row] = beta == 0.0f ? s : fmaf(beta, y[row], s);
}

}  // namespace

bool GemvBf16Supports(int64_t cols, const void* x, const void* w) {
  return cols > 0 && cols % 8 == 0 && cols <= kMaxCols &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

CudaStatus GemvBf16Cuda(const uint16_t* x, int64_t cols, const uint16_t* w, int64_t rows,
                        float* y, float beta, cudaStream_t stream) {
  if (rows <= 0) return CudaStatus::Ok();
  if (!GemvBf16Supports(cols, x, w)) {
    return CudaStatus::Error("GemvBf16Cuda: cols must be a multiple of 8 up to 24576, x and W "
                             "16-byte aligned");
  }
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return CudaStatus::Error("GemvBf16Cuda: too many rows");
  const size_t smem = static_cast<size_t>(cols) * 2;
  if (smem > 48 * 1024) {
    WITCERT_CUDA_CALL(cudaFuncSetAttribute(GemvBf16Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
  }
  GemvBf16Kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(x, cols, w, rows, y, beta);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

}  // namespace witcert
