// Causal attention of a prompt chunk over its own fresh K/V (fp32), on the GPU: the CUDA twin
// of CpuBackend::FreshCausalAttention. Exact attention, no KV reads, no certificate (the
// chunk at position 0 attends only to what it just computed, which no quantizer touched).
//
// Math, for query token i < n and query head h with KV head g = h / (Hq/Hkv):
//   out[i, h] = Σ_{j ≤ i} softmax_j(q[i, h]·k[j, g] / √d) · v[j, g]
// Shapes (rows at the given strides, in floats): q [n, q_stride] holding heads [Hq, d] at
// column 0; k, v [n, kv_stride] holding [Hkv, d]; out [n, out_stride] holding [Hq, d].
// Preconditions: d a multiple of 32 and ≤ 256; Hq a multiple of Hkv.
//
// Structure (why): one warp per (query, head), online softmax over key tiles of 32: each lane
// scores one key of the tile (a full d-dot from L2-resident K), the warp rescales once per
// tile, then accumulates V with each lane owning d/32 channels. Simple and exact in fp32; a
// tensor-core flash kernel is the follow-up for long prompts.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"

namespace witcert {

CudaStatus PrefillAttentionCuda(const float* q, int64_t q_stride, const float* k, const float* v,
                                int64_t kv_stride, int64_t n, int32_t num_heads,
                                int32_t num_kv_heads, int32_t head_dim, float* out,
                                int64_t out_stride, cudaStream_t stream);

}  // namespace witcert
