// Element-wise and row-wise transformer ops on the GPU: the CUDA twins of
// kernels/cpu/transformer_ops.h, in the layouts the CUDA backend's decode step uses.
//
// Precision (why): activations stay fp32 on the device; only the inputs of the cuBLAS GEMMs
// are rounded to bf16 (the weights are bf16), so the ops that feed a GEMM can write bf16
// directly (`out_bf16`) and skip a separate conversion pass. Reductions accumulate in fp32
// (warp/block trees), RoPE angles are computed in double like the CPU reference so rotations
// stay accurate at large positions. bf16 values cross the API as their uint16_t bits, like
// the KV pool (paged_kv_cuda.h). All functions launch on `stream` and return the launch
// error; none synchronizes.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ops/rope_freq.h"

namespace witcert {

// out[i, :] = fp32(table[ids[i], :]). table [vocab, hidden] bf16; ids [n] (device);
// out [n, hidden] fp32. An id outside [0, vocab) yields a row of NaN (like EmbeddingLookup).
CudaStatus EmbeddingCuda(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids,
                         int64_t n, float* out, cudaStream_t stream);

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]²) + eps) * weight. x [n, dim] fp32, weight [dim]
// fp32. Writes out_f32 [n, dim] and/or out_bf16 [n, dim] (either may be null; out_f32 may
// alias x).
CudaStatus RmsNormCuda(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                       float* out_f32, uint16_t* out_bf16, cudaStream_t stream);

// Qwen3's per-head q/k RMSNorm, in place on the QKV projection's rows: qkv [n, row_stride] holds
// Hq q heads at column 0, then Hkv k heads (v follows, untouched); each head's d values become
// x / sqrt(mean(x²) + eps) · weight, with q_weight [d] for q heads and k_weight [d] for k heads.
// One warp per (row, head); the sum of squares in double, as the CPU's RmsNorm (kernels/cpu/
// transformer_ops.h) takes it. Runs before RoPE.
CudaStatus QkNormCuda(float* qkv, int64_t n, int64_t row_stride, int32_t num_heads, int32_t num_kv_heads,
                      int32_t head_dim, const float* q_weight, const float* k_weight, float eps,
                      cudaStream_t stream);

// Rotates, in place, the first `num_heads` heads of each row of x: row i starts at
// x + i·row_stride and holds heads [num_heads, head_dim]; its position is positions[i]
// (device). Pair p < head_dim/2 has angle pos·θ^(−2p/head_dim) (divided by freq.factors[p] and
// with cos and sin times freq.attn_factor when the model scales RoPE: rope_freq.h) and dims
// (2p, 2p+1) when `interleaved`, else (p, p + head_dim/2).
CudaStatus RopeCuda(float* x, int64_t n, int64_t row_stride, int32_t num_heads, int32_t head_dim,
                    const int64_t* positions, cuda_ops::RopeFreq freq, bool interleaved, cudaStream_t stream);

// The fused QKV rows split into contiguous q [n, Hq·d], k [n, Hkv·d], v [n, Hkv·d], with RoPE
// applied to q and k on the way (the same arithmetic as RopeCuda, so the results are bitwise
// those of RopeCuda on the fused rows followed by three strided copies, in one launch).
// qkv [n, qkv_stride] holds q heads at column 0, k heads at Hq·d, v heads at (Hq + Hkv)·d.
// The CUDA backend runs the kernels that fold this one in (GemvBf16RopeSplitCuda at batch 1,
// RopeSplitWriteKvCuda above it); their tests hold them to its bits.
CudaStatus RopeSplitQkvCuda(const float* qkv, int64_t n, int64_t qkv_stride, int32_t num_heads,
                            int32_t num_kv_heads, int32_t head_dim, const int64_t* positions,
                            cuda_ops::RopeFreq freq, bool interleaved, float* q, float* k, float* v,
                            cudaStream_t stream);

// out[i, j] = silu(gate[i, j]) · up[i, j], j < cols. gate, up: rows of `cols` at stride
// `in_stride` (they may be the two halves of one fused [n, 2·cols] GEMM output);
// out_f32 / out_bf16 [n, cols] (either may be null).
CudaStatus SwiGluCuda(const float* gate, const float* up, int64_t n, int64_t cols,
                      int64_t in_stride, float* out_f32, uint16_t* out_bf16,
                      cudaStream_t stream);

// y[j] += x[j], j < count (the residual add).
CudaStatus AddInPlaceCuda(float* y, const float* x, int64_t count, cudaStream_t stream);

// y[i, j] += bias[j] for rows i < n of `cols` at stride `row_stride`. bias [cols] fp32.
CudaStatus AddBiasRowsCuda(float* y, int64_t n, int64_t cols, int64_t row_stride,
                           const float* bias, cudaStream_t stream);

// out[j] = bf16(x[j]) (round to nearest even), j < count.
CudaStatus FloatToBf16Cuda(const float* x, int64_t count, uint16_t* out, cudaStream_t stream);

// out[i] = ‖x[i, :]‖₂ over rows of `dim` (contiguous), i < n.
CudaStatus RowNormsCuda(const float* x, int64_t n, int32_t dim, float* out, cudaStream_t stream);

// out[i] = argmax_j logits[i, j] over [n, vocab]; ties → the smallest index; NaN entries are
// never chosen (an all-NaN row yields 0).
CudaStatus ArgmaxRowsCuda(const float* logits, int64_t n, int64_t vocab, int32_t* out,
                          cudaStream_t stream);

}  // namespace witcert
