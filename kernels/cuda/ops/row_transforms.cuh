// Row transforms shared by the standalone kernels (transformer_ops_cuda.h) and the batch-1
// GEMV that prepares its own input or finishes its own output (gemv_bf16_cuda.h): one row's
// RMSNorm in a 256-thread CTA, the bf16 rounding, one RoPE rotation and SwiGLU's product. Both
// sides call these functions (the norm with the same thread mapping), so their outputs are the
// same bits.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/cuda/ops/rope_freq.h"

namespace witcert::cuda_ops {

constexpr int kRowThreads = 256;

// Sum over the block (blockDim.x == kRowThreads); every thread gets the result.
// kReused = false: for a kernel that sums once, without the barrier that lets warp_sums be
// reused (the same sum, the same bits).
template <bool kReused = true>
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float warp_sums[kRowThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < kRowThreads / 32; ++w) s += warp_sums[w];
  if constexpr (kReused) __syncthreads();  // warp_sums may be reused by the caller's next BlockSum
  return s;
}

__device__ __forceinline__ uint16_t ToBf16Bits(float f) {
  __nv_bfloat16 b = __float2bfloat16_rn(f);
  return *reinterpret_cast<uint16_t*>(&b);
}

// Thread t's float4 k of the row is element j = t + k·kRowThreads (zero past n4 = dim/4).
template <int V>
__device__ __forceinline__ void LoadRowVec4(const float4* x, int64_t n4, float4 (&xv)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t j = threadIdx.x + int64_t{k} * kRowThreads;
    xv[k] = j < n4 ? x[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// RMSNorm's scale 1/sqrt(mean(x²) + eps) of a row held as LoadRowVec4 leaves it (zeros past
// the row add nothing, so any V ≥ ⌈n4 / kRowThreads⌉ gives the same bits). Every thread calls it.
template <int V, bool kReused = true>
__device__ __forceinline__ float RmsScale(const float4 (&xv)[V], int64_t dim, float eps) {
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k) ss += xv[k].x * xv[k].x + xv[k].y * xv[k].y + xv[k].z * xv[k].z + xv[k].w * xv[k].w;
  ss = BlockSum<kReused>(ss);
  return static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / dim + eps));
}

// y = x·scale·w of one float4, and its four bf16 bits packed as RmsNormCuda stores them.
__device__ __forceinline__ float4 NormScale4(const float4 x, float scale, const float4 w) {
  return make_float4(x.x * scale * w.x, x.y * scale * w.y, x.z * scale * w.z, x.w * scale * w.w);
}
__device__ __forceinline__ uint2 PackBf16x4(const float4 y) {
  uint2 b;
  b.x = static_cast<uint32_t>(ToBf16Bits(y.x)) | (static_cast<uint32_t>(ToBf16Bits(y.y)) << 16);
  b.y = static_cast<uint32_t>(ToBf16Bits(y.z)) | (static_cast<uint32_t>(ToBf16Bits(y.w)) << 16);
  return b;
}

// RoPE pair p of a head of `head_dim`: the angle pos·θ^(−2p/d) / factors[p] in double (accurate at
// large positions; rope_freq.h), cos and sin times the attention factor, then (xa, xb) →
// (xa·c − xb·s, xa·s + xb·c) with each rounding spelled out, so no caller's contraction choices
// can change a bit.
struct RopeRotation {
  float c, s;
};
__device__ __forceinline__ RopeRotation RopeAngle(int32_t p, int32_t head_dim, int64_t pos, RopeFreq f) {
  double inv_freq = pow(static_cast<double>(f.theta), -2.0 * p / head_dim);
  if (f.factors != nullptr) inv_freq /= static_cast<double>(f.factors[p]);
  const double angle = static_cast<double>(pos) * inv_freq;
  const double magnitude = f.attn_factor;
  return RopeRotation{static_cast<float>(cos(angle) * magnitude), static_cast<float>(sin(angle) * magnitude)};
}
__device__ __forceinline__ void Rotate(RopeRotation r, float xa, float xb, float* oa, float* ob) {
  *oa = __fsub_rn(__fmul_rn(xa, r.c), __fmul_rn(xb, r.s));
  *ob = __fadd_rn(__fmul_rn(xa, r.s), __fmul_rn(xb, r.c));
}
// The dims of pair p: (2p, 2p+1) when interleaved, else (p, p + d/2).
__device__ __forceinline__ int32_t RopeDimA(int32_t p, int32_t head_dim, bool interleaved) {
  return interleaved ? 2 * p : p;
}
__device__ __forceinline__ int32_t RopeDimB(int32_t p, int32_t head_dim, bool interleaved) {
  return interleaved ? 2 * p + 1 : p + head_dim / 2;
}

// Pair p of one head at position pos: reads `in`, writes `out` (which may be `in`).
__device__ __forceinline__ void RotatePair(const float* in, float* out, int32_t p, int32_t head_dim,
                                           int64_t pos, RopeFreq freq, bool interleaved) {
  const int32_t a = RopeDimA(p, head_dim, interleaved), b = RopeDimB(p, head_dim, interleaved);
  Rotate(RopeAngle(p, head_dim, pos, freq), in[a], in[b], &out[a], &out[b]);
}

// SwiGLU's element: silu(g)·u = g / (1 + e^{−g}) · u.
__device__ __forceinline__ float SiluMul(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

}  // namespace witcert::cuda_ops
