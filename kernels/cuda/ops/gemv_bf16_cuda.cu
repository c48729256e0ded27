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

// R output rows per warp: each 16-byte chunk of x (from shared memory) serves R rows, and a
// lane keeps R · kUnroll weight loads in flight.
template <int R>
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
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (row0 >= rows) return;
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {  // rows past the end re-read the last row; never stored
    wr[r] = reinterpret_cast<const uint4*>(w + (row0 + r < rows ? row0 + r : rows - 1) * cols);
  }
  float acc[R][kUnroll] = {};
  int64_t i = lane;
  for (; i + (kUnroll - 1) * 32 < c8; i += kUnroll * 32) {
    uint4 wv[R][kUnroll];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[r][u] = __ldcs(wr[r] + i + u * 32);  // streamed once
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint4 xv = xs[i + u * 32];
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][u] = Dot8(wv[r][u], xv, acc[r][u]);
    }
  }
  for (; i < c8; i += 32) {
    const uint4 xv = xs[i];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][0] = Dot8(__ldcs(wr[r] + i), xv, acc[r][0]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s = (acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const int64_t row = row0 + r;
    if (lane == 0 && row < rows) y[row] = beta == 0.0f ? s : fmaf(beta, y[row], s);
  }
}

template <int R>
CudaStatus Launch(const uint16_t* x, int64_t cols, const uint16_t* w, int64_t rows, float* y,
                  float beta, cudaStream_t stream) {
  const int64_t blocks = (rows + kWarps * R - 1) / (kWarps * R);
  if (blocks > 0x7fffffff) return CudaStatus::Error("GemvBf16Cuda: too many rows");
  const size_t smem = static_cast<size_t>(cols) * 2;
  GemvBf16Kernel<R><<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(x, cols, w, rows, y, beta);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

}  // namespace

bool GemvBf16Supports(int64_t cols, const void* x, const void* w) {
  return cols > 0 && cols % 8 == 0 && cols <= kMaxCols &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

CudaStatus GemvBf16Cuda(const uint16_t* x, int64_t cols, const uint16_t* w, int64_t rows,
                        float* y, float beta, cudaStream_t stream, int rows_per_warp) {
  if (rows <= 0) return CudaStatus::Ok();
  if (!GemvBf16Supports(cols, x, w)) {
    return CudaStatus::Error("GemvBf16Cuda: cols must be a multiple of 8 up to 24576, x and W "
                             "16-byte aligned");
  }
  switch (rows_per_warp) {
    case 1: return Launch<1>(x, cols, w, rows, y, beta, stream);
    case 2: return Launch<2>(x, cols, w, rows, y, beta, stream);
    case 4: return Launch<4>(x, cols, w, rows, y, beta, stream);
    default: return CudaStatus::Error("GemvBf16Cuda: rows_per_warp must be 1, 2 or 4");
  }
}

}  // namespace witcert
