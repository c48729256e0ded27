// The exact fp32 path of the causal prefill attention (math and shapes in
// prefill_attention_cuda.h): the fallback for head dims the tensor-core kernel does not take,
// and the side-by-side baseline of bench_prefill_attention.
//
// Structure (why): one warp per (query, head), online softmax over key tiles of 32: each lane
// scores one key of the tile (a full d-dot from L2-resident K), the warp rescales once per
// tile, then accumulates V with each lane owning d/32 channels. Simple and exact in fp32
// (2e-5 absolute against a double reference on O(1) outputs), but O(n²·d) on CUDA cores.
#include <cmath>

#include "kernels/cuda/ops/prefill_attention_paths.h"

namespace witcert {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxChannelsPerLane = 8;  // d ≤ 256

// Block: kWarpsPerBlock consecutive queries of one head. grid = (ceil(n / warps), Hq).
__global__ void PrefillAttentionFp32Kernel(const float* q, int64_t q_stride, const float* k,
                                           const float* v, int64_t kv_stride, int64_t n,
                                           int32_t group, int32_t head_dim, float scale, float* out,
                                           int64_t out_stride) {
  extern __shared__ float q_smem[];  // [kWarpsPerBlock, head_dim]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = blockIdx.x * int64_t{kWarpsPerBlock} + warp;
  const int32_t h = blockIdx.y;
  const int32_t g = h / group;
  if (i >= n) return;  // whole warp leaves together; no block-wide barrier below
  float* qs = q_smem + warp * head_dim;
  for (int c = lane; c < head_dim; c += 32) qs[c] = q[i * q_stride + int64_t{h} * head_dim + c];
  __syncwarp();
  const int cpl = head_dim / 32;  // channels per lane: lane + 32·c
  float acc[kMaxChannelsPerLane];
#pragma unroll
  for (int c = 0; c < kMaxChannelsPerLane; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t base = 0; base <= i; base += 32) {
    const int64_t j = base + lane;
    float s = -INFINITY;
    if (j <= i) {
      const float* kj = k + j * kv_stride + int64_t{g} * head_dim;  // [d]
      float dot = 0.0f;
      for (int c = 0; c < head_dim; ++c) dot += qs[c] * kj[c];
      s = dot * scale;
    }
    float tile_max = s;
    for (int o = 16; o > 0; o >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(~0u, tile_max, o));
    const float m_new = fmaxf(m, tile_max);  // finite: key `base` ≤ i is always valid
    const float corr = expf(m - m_new);      // 0 on the first tile (m = -inf)
    const float p = j <= i ? expf(s - m_new) : 0.0f;
    float p_sum = p;
    for (int o = 16; o > 0; o >>= 1) p_sum += __shfl_xor_sync(~0u, p_sum, o);
    l = l * corr + p_sum;
#pragma unroll
    for (int c = 0; c < kMaxChannelsPerLane; ++c) acc[c] *= corr;
    const int64_t remaining = i - base + 1;
    const int valid = remaining < 32 ? static_cast<int>(remaining) : 32;
    for (int t = 0; t < valid; ++t) {
      const float pt = __shfl_sync(~0u, p, t);
      const float* vj = v + (base + t) * kv_stride + int64_t{g} * head_dim;  // [d]
#pragma unroll
      for (int c = 0; c < kMaxChannelsPerLane; ++c) {
        if (c < cpl) acc[c] += pt * vj[lane + 32 * c];
      }
    }
    m = m_new;
  }
  const float inv = 1.0f / l;
  float* o = out + i * out_stride + int64_t{h} * head_dim;
#pragma unroll
  for (int c = 0; c < kMaxChannelsPerLane; ++c) {
    if (c < cpl) o[lane + 32 * c] = acc[c] * inv;
  }
}

}  // namespace

CudaStatus PrefillAttentionFp32Cuda(const float* q, int64_t q_stride, const float* k,
                                    const float* v, int64_t kv_stride, int64_t n, int32_t num_heads,
                                    int32_t num_kv_heads, int32_t head_dim, float* out,
                                    int64_t out_stride, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (head_dim % 32 != 0 || head_dim > 32 * kMaxChannelsPerLane) {
    return CudaStatus::Error("PrefillAttentionFp32Cuda: head_dim must be a multiple of 32, <= 256");
  }
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) {
    return CudaStatus::Error(
        "PrefillAttentionFp32Cuda: num_heads must be a multiple of num_kv_heads");
  }
  const int64_t blocks_x = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks_x > 0x7fffffff || num_heads > 65535) {
    return CudaStatus::Error("PrefillAttentionFp32Cuda: chunk too large");
  }
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(num_heads));
  const size_t smem = sizeof(float) * kWarpsPerBlock * head_dim;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  PrefillAttentionFp32Kernel<<<grid, 32 * kWarpsPerBlock, smem, stream>>>(
      q, q_stride, k, v, kv_stride, n, num_heads / num_kv_heads, head_dim, scale, out, out_stride);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return CudaErrorStatus(err, "PrefillAttentionFp32Kernel", __FILE__, __LINE__);
  }
  return CudaStatus::Ok();
}

}  // namespace witcert
