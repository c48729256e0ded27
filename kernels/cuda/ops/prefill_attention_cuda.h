// Causal attention of a prompt chunk over its own fresh K/V (fp32), on the GPU: the CUDA twin
// of CpuBackend::FreshCausalAttention. Exact attention, no KV reads, no certificate (the
// chunk at position 0 attends only to what it just computed, which no quantizer touched).
//
// Math, for query token i < n and query head h with KV head g = h / (Hq/Hkv):
//   out[i, h] = Σ_{j ≤ i} softmax_j(q[i, h]·k[j, g] / √d) · v[j, g]
// Shapes (rows at the given strides, in floats): q [n, q_stride] holding heads [Hq, d] at
// column 0; k, v [n, kv_stride] holding [Hkv, d]; out [n, out_stride] holding [Hq, d].
// Preconditions: d a multiple of 32 and ≤ 256; Hq a multiple of Hkv. n ≤ 0 is a no-op.
//
// Two paths (prefill_attention_paths.h), chosen per call:
// - Tensor cores (prefill_attention_mma.cu), taken for d ∈ {64, 128} when q/k/v rows are
//   16-byte aligned (pointers and strides) and out rows 8-byte aligned: a flash-attention-2
//   kernel whose q·log2(e)/√d, k, v and softmax weights are rounded to fp16 for mma.sync,
//   with fp32 accumulation and fp32 online softmax. Tolerance: 2e-3 absolute on outputs of
//   size O(1) (tested with |q|, |k| ≤ 1.5, |v| ≤ 2 against a double reference, n ≤ 2048,
//   d 64 and 128: measured max 1.4e-3, typically 0.5-1.2e-3; the error comes from the fp16
//   rounding of v and of the softmax weights, each ≤ 2^-11 relative, and of q·k).
// - Exact fp32 (prefill_attention_fp32.cu), every other shape: one warp per (query, head),
//   O(n²·d) on CUDA cores. Tolerance: 2e-5 absolute on the same inputs.
// The fp16 path needs |q|·log2(e)/√d, |k| and |v| below 65504 (fp16's range) and keeps ~11
// significant bits of each; callers that need bit-level agreement with the CPU backend must
// not rely on it. Speed on the H200 (bench/decode_gpu/bench_prefill_attention): 195-261
// TFLOP/s at Llama-3.1-8B shapes for n 2k-32k, 216-279x the fp32 path.
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
