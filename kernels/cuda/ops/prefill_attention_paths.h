// The two implementations behind PrefillAttentionCuda, reachable on their own so that tests
// can hold each to its own tolerance and the benchmark can time them side by side. Engine
// code calls only PrefillAttentionCuda (prefill_attention_cuda.h), which picks between them.
//
// Arguments, math and shapes are those of PrefillAttentionCuda; each path checks its own
// preconditions (an error, never an abort) and returns Ok for n ≤ 0.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"

namespace witcert {

// Whether the tensor-core path takes this call: head_dim 64 or 128; q, k, v 16-byte aligned
// with strides a multiple of 4 floats (float4 loads); out 8-byte aligned with an even stride
// (float2 stores); fewer than 65536 query tiles of 128 rows.
bool PrefillAttentionMmaSupports(const float* q, int64_t q_stride, const float* k, const float* v,
                                 int64_t kv_stride, int64_t n, int32_t head_dim, const float* out,
                                 int64_t out_stride);

// Tensor-core flash kernel (fp16 MMA, fp32 accumulation); prefill_attention_mma.cu. Returns an
// error where PrefillAttentionMmaSupports is false.
CudaStatus PrefillAttentionMmaCuda(const float* q, int64_t q_stride, const float* k, const float* v,
                                   int64_t kv_stride, int64_t n, int32_t num_heads,
                                   int32_t num_kv_heads, int32_t head_dim, float* out,
                                   int64_t out_stride, cudaStream_t stream);

// As PrefillAttentionMmaCuda with 16 or 32 query rows per warp; 0 picks as
// PrefillAttentionMmaCuda does (32 unless that grid has fewer CTAs than the GPU has SMs).
CudaStatus PrefillAttentionMmaCudaRows(int rows_per_warp, const float* q, int64_t q_stride,
                                       const float* k, const float* v, int64_t kv_stride, int64_t n,
                                       int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                       float* out, int64_t out_stride, cudaStream_t stream);

// The rows per warp PrefillAttentionMmaCuda picks for this chunk on the current device.
int PrefillAttentionMmaDefaultRowsPerWarp(int64_t n, int32_t num_heads);

// Exact fp32 kernel, one warp per (query, head); prefill_attention_fp32.cu. head_dim a
// multiple of 32 and ≤ 256, else an error.
CudaStatus PrefillAttentionFp32Cuda(const float* q, int64_t q_stride, const float* k,
                                    const float* v, int64_t kv_stride, int64_t n, int32_t num_heads,
                                    int32_t num_kv_heads, int32_t head_dim, float* out,
                                    int64_t out_stride, cudaStream_t stream);

}  // namespace witcert
