// Row-wise and element-wise transformer ops (see the header for math and shapes).
//
// These are a small share of a decode step next to the GEMMs and attention: simple
// grid-stride kernels, one block per row for the row reductions.
#include "kernels/cuda/ops/transformer_ops_cuda.h"

#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/ops/row_transforms.cuh"

namespace witcert {
namespace {

constexpr int kThreads = cuda_ops::kRowThreads;

CudaStatus LastLaunch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return CudaErrorStatus(err, what, __FILE__, __LINE__);
  return CudaStatus::Ok();
}

unsigned Blocks(int64_t count) {
  int64_t b = (count + kThreads - 1) / kThreads;
  if (b > 65535 * 8) b = 65535 * 8;  // grid-stride loops cover the rest
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

using cuda_ops::BlockSum;
using cuda_ops::ToBf16Bits;

__device__ inline float Bf16BitsToFloat(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__global__ void EmbeddingKernel(const uint16_t* table, int64_t vocab, int64_t hidden,
                                const int32_t* ids, int64_t n, float* out) {
  const int64_t total = n * hidden;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / hidden, j = e % hidden;
    const int32_t id = ids[i];
    out[e] = (id < 0 || id >= vocab) ? __int_as_float(0x7fc00000)
                                     : Bf16BitsToFloat(table[id * hidden + j]);
  }
}

__global__ void RmsNormKernel(const float* x, const float* weight, int64_t dim, float eps,
                              float* out_f32, uint16_t* out_bf16) {
  const int64_t row = blockIdx.x;
  const float* xi = x + row * dim;  // [dim]
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += xi[j] * xi[j];
  ss = BlockSum<>(ss);
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / dim + eps));
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float y = xi[j] * scale * weight[j];
    if (out_bf16 != nullptr) out_bf16[row * dim + j] = ToBf16Bits(y);
    if (out_f32 != nullptr) out_f32[row * dim + j] = y;
  }
}

// The same for dim % 4 == 0 and dim ≤ 4·kThreads·V (the hidden sizes of real models): each
// thread loads its V float4s of x and of the weight up front, so a row costs about one memory
// latency instead of a dependent chain of them (a decode step normalizes 1 row, 2× per layer).
template <int V>
__global__ void RmsNormVec4Kernel(const float* x, const float* weight, int64_t dim, float eps,
                                  float* out_f32, uint16_t* out_bf16) {
  const int64_t row = blockIdx.x;
  const int64_t n4 = dim / 4;
  float4 xv[V], wv[V];
  cuda_ops::LoadRowVec4<V>(reinterpret_cast<const float4*>(x + row * dim), n4, xv);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t j = threadIdx.x + int64_t{k} * kThreads;
    wv[k] = j < n4 ? __ldg(reinterpret_cast<const float4*>(weight) + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  const float scale = cuda_ops::RmsScale<V>(xv, dim, eps);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t j = threadIdx.x + int64_t{k} * kThreads;
    if (j >= n4) break;
    const float4 y = cuda_ops::NormScale4(xv[k], scale, wv[k]);
    if (out_bf16 != nullptr) reinterpret_cast<uint2*>(out_bf16 + row * dim)[j] = cuda_ops::PackBf16x4(y);
    if (out_f32 != nullptr) reinterpret_cast<float4*>(out_f32 + row * dim)[j] = y;
  }
}

__global__ void QkNormKernel(float* qkv, int64_t n, int64_t row_stride, int32_t num_heads,
                             int32_t num_kv_heads, int32_t head_dim, const float* q_weight,
                             const float* k_weight, float eps) {
  const int lane = threadIdx.x & 31;
  const int32_t heads = num_heads + num_kv_heads;
  const int64_t item = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5;  // (row, head)
  if (item >= n * heads) return;  // whole warp exits together
  const int64_t row = item / heads;
  const int32_t head = static_cast<int32_t>(item % heads);
  float* x = qkv + row * row_stride + int64_t{head} * head_dim;  // [head_dim]
  const float* w = head < num_heads ? q_weight : k_weight;         // [head_dim]
  double ss = 0.0;
  for (int32_t j = lane; j < head_dim; j += 32) ss += static_cast<double>(x[j]) * x[j];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, offset);
  const float scale = static_cast<float>(1.0 / sqrt(ss / head_dim + eps));
  for (int32_t j = lane; j < head_dim; j += 32) x[j] = __fmul_rn(__fmul_rn(x[j], scale), w[j]);
}

__global__ void RopeKernel(float* x, int64_t n, int64_t row_stride, int32_t num_heads,
                           int32_t head_dim, const int64_t* positions, cuda_ops::RopeFreq freq,
                           bool interleaved) {
  const int32_t half = head_dim / 2;
  const int64_t total = n * num_heads * half;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int32_t p = static_cast<int32_t>(e % half);
    const int64_t h = (e / half) % num_heads;
    const int64_t i = e / (int64_t{half} * num_heads);
    float* xh = x + i * row_stride + h * head_dim;  // [head_dim]
    cuda_ops::RotatePair(xh, xh, p, head_dim, positions[i], freq, interleaved);
  }
}

// One RoPE pair (or, past the pairs, one v element) per index; see RopeSplitQkvCuda.
__global__ void RopeSplitQkvKernel(const float* qkv, int64_t n, int64_t qkv_stride,
                                   int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                   const int64_t* positions, cuda_ops::RopeFreq freq, bool interleaved,
                                   float* q, float* k, float* v) {
  cuda_launch::WaitForPreviousKernel();  // launched to overlap the QKV projection's tail
  const int32_t half = head_dim / 2, heads = num_heads + num_kv_heads;
  const int64_t pairs = n * heads * half, kv_dim = int64_t{num_kv_heads} * head_dim;
  const int64_t total = pairs + n * kv_dim;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    if (e >= pairs) {  // v: a plain copy
      const int64_t f = e - pairs, i = f / kv_dim, j = f % kv_dim;
      v[f] = qkv[i * qkv_stride + int64_t{heads} * head_dim + j];
      continue;
    }
    const int32_t p = static_cast<int32_t>(e % half);
    const int64_t h = (e / half) % heads;
    const int64_t i = e / (int64_t{half} * heads);
    const float* xh = qkv + i * qkv_stride + h * head_dim;  // [head_dim]
    float* out = h < num_heads ? q + (i * num_heads + h) * head_dim
                               : k + (i * num_kv_heads + (h - num_heads)) * head_dim;
    cuda_ops::RotatePair(xh, out, p, head_dim, positions[i], freq, interleaved);
  }
}

__global__ void SwiGluKernel(const float* gate, const float* up, int64_t n, int64_t cols,
                             int64_t in_stride, float* out_f32, uint16_t* out_bf16) {
  cuda_launch::WaitForPreviousKernel();  // launched to overlap the gate|up projection's tail
  const int64_t total = n * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / cols, j = e % cols;
    const float y = cuda_ops::SiluMul(gate[i * in_stride + j], up[i * in_stride + j]);
    if (out_bf16 != nullptr) out_bf16[e] = ToBf16Bits(y);
    if (out_f32 != nullptr) out_f32[e] = y;
  }
}

__global__ void AddKernel(float* y, const float* x, int64_t count) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < count;
       e += int64_t{gridDim.x} * blockDim.x) {
    y[e] += x[e];
  }
}

__global__ void AddBiasKernel(float* y, int64_t n, int64_t cols, int64_t row_stride,
                              const float* bias) {
  const int64_t total = n * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / cols, j = e % cols;
    y[i * row_stride + j] += bias[j];
  }
}

__global__ void ToBf16Kernel(const float* x, int64_t count, uint16_t* out) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < count;
       e += int64_t{gridDim.x} * blockDim.x) {
    out[e] = ToBf16Bits(x[e]);
  }
}

// One warp per row.
__global__ void RowNormsKernel(const float* x, int64_t n, int32_t dim, float* out) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  float ss = 0.0f;
  for (int32_t j = lane; j < dim; j += 32) {
    const float v = x[row * dim + j];
    ss += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) out[row] = sqrtf(ss);
}

// One block per row: each thread keeps its best (value, index), then a tree over the block.
__global__ void ArgmaxKernel(const float* logits, int64_t vocab, int32_t* out) {
  __shared__ float best_v[kThreads];
  __shared__ int32_t best_i[kThreads];
  const float* row = logits + blockIdx.x * vocab;  // [vocab]
  float bv = -INFINITY;
  int32_t bi = -1;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = row[j];
    if (v == v && (bi < 0 || v > bv)) {  // first index wins ties (j increases per thread)
      bv = v;
      bi = static_cast<int32_t>(j);
    }
  }
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = best_v[threadIdx.x + s];
      const int32_t oi = best_i[threadIdx.x + s];
      const int32_t mi = best_i[threadIdx.x];
      const bool take = oi >= 0 && (mi < 0 || ov > best_v[threadIdx.x] ||
                                    (ov == best_v[threadIdx.x] && oi < mi));
      if (take) {
        best_v[threadIdx.x] = ov;
        best_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_i[0] < 0 ? 0 : best_i[0];
}

}  // namespace

CudaStatus EmbeddingCuda(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids,
                         int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  EmbeddingKernel<<<Blocks(n * hidden), kThreads, 0, stream>>>(table, vocab, hidden, ids, n, out);
  return LastLaunch("EmbeddingKernel");
}

CudaStatus RmsNormCuda(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                       float* out_f32, uint16_t* out_bf16, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (n > 0x7fffffff) return CudaStatus::Error("RmsNormCuda: too many rows");
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec4 = dim % 4 == 0 && aligned(x) && aligned(weight) &&
                    (out_f32 == nullptr || aligned(out_f32)) &&
                    (out_bf16 == nullptr || reinterpret_cast<uintptr_t>(out_bf16) % 8 == 0);
  const int64_t per_thread = (dim / 4 + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(n);
  if (vec4 && per_thread <= 2) {
    RmsNormVec4Kernel<2><<<grid, kThreads, 0, stream>>>(x, weight, dim, eps, out_f32, out_bf16);
  } else if (vec4 && per_thread <= 4) {
    RmsNormVec4Kernel<4><<<grid, kThreads, 0, stream>>>(x, weight, dim, eps, out_f32, out_bf16);
  } else if (vec4 && per_thread <= 8) {
    RmsNormVec4Kernel<8><<<grid, kThreads, 0, stream>>>(x, weight, dim, eps, out_f32, out_bf16);
  } else {
    RmsNormKernel<<<grid, kThreads, 0, stream>>>(x, weight, dim, eps, out_f32, out_bf16);
  }
  return LastLaunch("RmsNormKernel");
}

CudaStatus QkNormCuda(float* qkv, int64_t n, int64_t row_stride, int32_t num_heads, int32_t num_kv_heads,
                      int32_t head_dim, const float* q_weight, const float* k_weight, float eps,
                      cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (qkv == nullptr || q_weight == nullptr || k_weight == nullptr || num_heads <= 0 || num_kv_heads < 0 ||
      head_dim <= 0 || row_stride < int64_t{num_heads + num_kv_heads} * head_dim) {
    return CudaStatus::Error("QkNormCuda: needs qkv rows holding the q and k heads and both weights");
  }
  const int64_t warps = n * (num_heads + num_kv_heads);
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return CudaStatus::Error("QkNormCuda: too many rows in one call");
  QkNormKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(qkv, n, row_stride, num_heads,
                                                                      num_kv_heads, head_dim, q_weight,
                                                                      k_weight, eps);
  return LastLaunch("QkNormKernel");
}

CudaStatus RopeCuda(float* x, int64_t n, int64_t row_stride, int32_t num_heads, int32_t head_dim,
                    const int64_t* positions, cuda_ops::RopeFreq freq, bool interleaved, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (head_dim % 2 != 0) return CudaStatus::Error("RopeCuda: head_dim must be even");
  RopeKernel<<<Blocks(n * num_heads * (head_dim / 2)), kThreads, 0, stream>>>(
      x, n, row_stride, num_heads, head_dim, positions, freq, interleaved);
  return LastLaunch("RopeKernel");
}

CudaStatus RopeSplitQkvCuda(const float* qkv, int64_t n, int64_t qkv_stride, int32_t num_heads,
                            int32_t num_kv_heads, int32_t head_dim, const int64_t* positions,
                            cuda_ops::RopeFreq freq, bool interleaved, float* q, float* k, float* v,
                            cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (head_dim % 2 != 0) return CudaStatus::Error("RopeSplitQkvCuda: head_dim must be even");
  if (qkv_stride < int64_t{num_heads + 2 * num_kv_heads} * head_dim) {
    return CudaStatus::Error("RopeSplitQkvCuda: qkv_stride shorter than the q, k and v heads");
  }
  const int64_t total = n * (num_heads + num_kv_heads) * (head_dim / 2) +
                        n * int64_t{num_kv_heads} * head_dim;
  return cuda_launch::Launch(RopeSplitQkvKernel, dim3(Blocks(total)), dim3(kThreads), 0, stream,
                             /*overlap_previous=*/true, qkv, n, qkv_stride, num_heads, num_kv_heads,
                             head_dim, positions, freq, interleaved, q, k, v);
}

CudaStatus SwiGluCuda(const float* gate, const float* up, int64_t n, int64_t cols,
                      int64_t in_stride, float* out_f32, uint16_t* out_bf16,
                      cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  return cuda_launch::Launch(SwiGluKernel, dim3(Blocks(n * cols)), dim3(kThreads), 0, stream,
                             /*overlap_previous=*/true, gate, up, n, cols, in_stride, out_f32, out_bf16);
}

CudaStatus AddInPlaceCuda(float* y, const float* x, int64_t count, cudaStream_t stream) {
  if (count <= 0) return CudaStatus::Ok();
  AddKernel<<<Blocks(count), kThreads, 0, stream>>>(y, x, count);
  return LastLaunch("AddKernel");
}

CudaStatus AddBiasRowsCuda(float* y, int64_t n, int64_t cols, int64_t row_stride,
                           const float* bias, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  AddBiasKernel<<<Blocks(n * cols), kThreads, 0, stream>>>(y, n, cols, row_stride, bias);
  return LastLaunch("AddBiasKernel");
}

CudaStatus FloatToBf16Cuda(const float* x, int64_t count, uint16_t* out, cudaStream_t stream) {
  if (count <= 0) return CudaStatus::Ok();
  ToBf16Kernel<<<Blocks(count), kThreads, 0, stream>>>(x, count, out);
  return LastLaunch("ToBf16Kernel");
}

CudaStatus RowNormsCuda(const float* x, int64_t n, int32_t dim, float* out, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  constexpr int kRowsPerBlock = kThreads / 32;
  RowNormsKernel<<<static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0,
                   stream>>>(x, n, dim, out);
  return LastLaunch("RowNormsKernel");
}

CudaStatus ArgmaxRowsCuda(const float* logits, int64_t n, int64_t vocab, int32_t* out,
                          cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  ArgmaxKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(logits, vocab, out);
  return LastLaunch("ArgmaxKernel");
}

}  // namespace witcert
