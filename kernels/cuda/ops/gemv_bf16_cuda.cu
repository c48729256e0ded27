#include "kernels/cuda/ops/gemv_bf16_cuda.h"

#include <cstdint>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/ops/row_transforms.cuh"

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

// Where x comes from: bf16 as given, or fp32 rounded to bf16 (FloatToBf16Cuda's bits),
// optionally RMS-normalized first (RmsNormCuda's bits: the same row functions).
enum class XIn { kBf16, kF32, kF32Norm };
constexpr int64_t kMaxF32Cols = 8192;  // the fp32 prologue holds x in registers: 8 float4 per thread
constexpr int kMaxVec4PerThread = kMaxF32Cols / 4 / kThreads;

struct GemvArgs {
  const uint16_t* x_bf16;
  const float* x_f32;
  const float* norm_weight;  // kF32Norm
  float eps;
  int64_t cols;
  const uint16_t* w;
  int64_t rows;
  float* y;
  float beta;
};

// R output rows per warp: each 16-byte chunk of x (from shared memory) serves R rows, and a
// lane keeps R · kUnroll weight loads in flight. A warp issues its first weight loads before
// the CTA stages x, so they are in flight during that prologue (for kF32Norm a block-wide
// reduction).
template <int R, XIn IN>
__global__ void __launch_bounds__(kThreads) GemvBf16Kernel(const GemvArgs a) {
  extern __shared__ uint4 xs[];  // [cols / 8]
  const int64_t cols = a.cols, rows = a.rows, c8 = cols / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  const bool live = row0 < rows;
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {  // rows past the end re-read the last row; never stored
    wr[r] = reinterpret_cast<const uint4*>(a.w + (row0 + r < rows ? row0 + r : rows - 1) * cols);
  }
  int64_t i = lane;
  uint4 wv[R][kUnroll];
  bool loaded = live && i + (kUnroll - 1) * 32 < c8;
  if (loaded) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[r][u] = __ldcs(wr[r] + i + u * 32);  // streamed once
    }
  }
  // Everything above reads only W. A programmatic dependent launch (GemvLaunch) may have started
  // this CTA before the previous kernel finished: wait for it before x and y are touched. (Without
  // that launch attribute both instructions are no-ops.) Let the next kernel launch early too.
  cuda_launch::WaitForPreviousKernel();
  cuda_launch::AllowNextKernelToStart();
  if constexpr (IN == XIn::kBf16) {
    const uint4* xg = reinterpret_cast<const uint4*>(a.x_bf16);
    for (int64_t j = threadIdx.x; j < c8; j += kThreads) xs[j] = xg[j];
  } else {
    const int64_t n4 = cols / 4;
    float4 xv[kMaxVec4PerThread];
    cuda_ops::LoadRowVec4<kMaxVec4PerThread>(reinterpret_cast<const float4*>(a.x_f32), n4, xv);
    float scale = 1.0f;
    if constexpr (IN == XIn::kF32Norm) scale = cuda_ops::RmsScale<kMaxVec4PerThread>(xv, cols, a.eps);
    uint2* xs2 = reinterpret_cast<uint2*>(xs);
#pragma unroll
    for (int k = 0; k < kMaxVec4PerThread; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      if (j >= n4) break;
      float4 y = xv[k];
      if constexpr (IN == XIn::kF32Norm) {
        y = cuda_ops::NormScale4(xv[k], scale, __ldg(reinterpret_cast<const float4*>(a.norm_weight) + j));
      }
      xs2[j] = cuda_ops::PackBf16x4(y);
    }
  }
  __syncthreads();
  if (!live) return;
  float acc[R][kUnroll] = {};
  for (; i + (kUnroll - 1) * 32 < c8; i += kUnroll * 32) {
    if (!loaded) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[r][u] = __ldcs(wr[r] + i + u * 32);
      }
    }
    loaded = false;
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
    if (lane == 0 && row < rows) a.y[row] = a.beta == 0.0f ? s : fmaf(a.beta, a.y[row], s);
  }
}

template <int R, XIn IN>
CudaStatus Launch(const GemvArgs& a, bool overlap_previous, cudaStream_t stream) {
  const int64_t blocks = (a.rows + kWarps * R - 1) / (kWarps * R);
  if (blocks > 0x7fffffff) return CudaStatus::Error("GemvBf16Cuda: too many rows");
  return cuda_launch::Launch(GemvBf16Kernel<R, IN>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                             static_cast<size_t>(a.cols) * 2, stream, overlap_previous, a);
}

template <XIn IN>
CudaStatus LaunchRows(const GemvArgs& a, GemvLaunch launch, cudaStream_t stream) {
  switch (launch.rows_per_warp) {
    case 1: return Launch<1, IN>(a, launch.overlap_previous, stream);
    case 2: return Launch<2, IN>(a, launch.overlap_previous, stream);
    case 4: return Launch<4, IN>(a, launch.overlap_previous, stream);
    default: return CudaStatus::Error("GemvBf16Cuda: rows_per_warp must be 1, 2 or 4");
  }
}

}  // namespace

bool GemvBf16Supports(int64_t cols, const void* x, const void* w) {
  return cols > 0 && cols % 8 == 0 && cols <= kMaxCols &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

bool GemvBf16FromF32Supports(int64_t cols, const void* x, const void* w, const void* norm_weight) {
  return GemvBf16Supports(cols, x, w) && cols <= kMaxF32Cols &&
         reinterpret_cast<uintptr_t>(norm_weight) % 16 == 0;
}

CudaStatus GemvBf16Cuda(const uint16_t* x, int64_t cols, const uint16_t* w, int64_t rows,
                        float* y, float beta, cudaStream_t stream, GemvLaunch launch) {
  if (rows <= 0) return CudaStatus::Ok();
  if (!GemvBf16Supports(cols, x, w)) {
    return CudaStatus::Error("GemvBf16Cuda: cols must be a multiple of 8 up to 24576, x and W "
                             "16-byte aligned");
  }
  return LaunchRows<XIn::kBf16>(GemvArgs{x, nullptr, nullptr, 0.0f, cols, w, rows, y, beta}, launch, stream);
}

CudaStatus GemvBf16FromF32Cuda(const float* x, const float* norm_weight, float eps, int64_t cols,
                               const uint16_t* w, int64_t rows, float* y, float beta,
                               cudaStream_t stream, GemvLaunch launch) {
  if (rows <= 0) return CudaStatus::Ok();
  if (!GemvBf16FromF32Supports(cols, x, w, norm_weight)) {
    return CudaStatus::Error("GemvBf16FromF32Cuda: cols must be a multiple of 8 up to 8192, x, W "
                             "and the norm weight 16-byte aligned");
  }
  const GemvArgs a{nullptr, x, norm_weight, eps, cols, w, rows, y, beta};
  return norm_weight != nullptr ? LaunchRows<XIn::kF32Norm>(a, launch, stream)
                                : LaunchRows<XIn::kF32>(a, launch, stream);
}

}  // namespace witcert
