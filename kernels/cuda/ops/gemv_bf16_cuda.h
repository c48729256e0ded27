// y [rows] = W [rows, cols] · x [cols] + beta · y, with bf16 x and W, fp32 accumulation and
// output: the single-row GEMM of a batch-1 decode step (QKV, O, gate|up, down, the head).
//
// Why: for n = 1 cuBLAS runs some shapes as a split-K GEMM plus a reduction kernel; this kernel
// is one launch. bench/decode_gpu/bench_gemv on the H200 (µs per call, weights streamed from
// DRAM, 8B shapes, 2026-12-01 21:40 UTC, 2 rows per warp vs cuBLAS): QKV 14.75 vs 17.3, O 11.2
// vs 13.4, gate|up 56.6 vs 57.5, down 30.5 vs 32.2, head 238.6 vs 247. (An earlier session's
// machine had put gate|up and down 3–5% behind cuBLAS.) So CudaBackend uses it for every
// batch-1 projection. Structure: R rows per warp, 16-byte weight loads, 4·R in flight per lane,
// x staged once per CTA in shared memory (the L2 sees x once per 8·R rows). Eight loads per
// row in flight (for the one-wave shapes) measured no faster and was not kept. Neither were
// weight loads staged in shared memory (2026-12-03; bench/decode_gpu/bench_gemv_chain (e), (f)):
// cp.async into per-lane slots, 3 steps in flight, streams a chain of GEMVs alone 5% faster, but
// made the batch-1 decode step 0.13–0.53 ms slower. A copy-engine ring per GEMV was slower on
// every shape (level with this kernel only on the head, at two CTAs per SM).
//
// The RMSNorm prologue (GemvBf16FromF32Cuda with a norm weight, and the SwiGLU and RoPE-split
// forms) is on each launch's critical path: bench/decode_gpu/bench_layer_gemvs put the engine's
// projections at 119 µs a layer against 111 without it. Its norm weight is therefore copied to
// shared memory before the wait for the previous kernel, its block sum keeps one barrier, and
// the fp32 x takes 4 float4 registers per thread up to 4096 columns (8 above): 115 µs a layer,
// the 8B batch-1 step 0.08–0.17 ms faster at 8k (int8-rtn KV 0.13–0.17). Applying the scale
// after the dot products instead (one barrier fewer, but bits unlike RmsNormCuda + GEMV) was no
// faster in the step.
// Forcing 3 or 4 CTAs per SM with launch bounds (80 or 64 registers, with spills) was slower.
// A GEMV that fits one wave at two CTAs per SM (O, down, the QKV parts at 2 rows per warp) keeps
// two loop steps of loads in flight: O 11.4 → 10.2 µs and a layer's projections 113.7 → 110.5 µs
// in bench_layer_gemvs, the same bits; the 8B step moved by 0 to −0.1 ms (int8-dither, 32k).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ops/rope_freq.h"

namespace witcert {

// True when GemvBf16Cuda takes this shape: cols % 8 == 0, cols ≤ 24576 (x fits shared
// memory), 16-byte aligned x and W.
bool GemvBf16Supports(int64_t cols, const void* x, const void* w);

// How a GEMV launches.
//  * rows_per_warp (1, 2 or 4): output rows each warp computes (more loads in flight per lane).
//  * overlap_previous: a programmatic dependent launch. The kernel may start while the previous
//    kernel on the stream is still finishing and issue its first weight loads then (W, and the
//    norm weight, must depend on nothing earlier in the stream); it waits for that kernel
//    (griddepcontrol.wait) before it reads x or reads or writes y. Saves the launch gap and the first DRAM round trip of each
//    GEMV in a dependent chain of them (a batch-1 decode step).
//  * prefetch_rows (taken at 2 rows per warp, one wave at two CTAs an SM, and rows whose rest
//    fits ~100 KB of shared memory a CTA with x; otherwise ignored): each warp has its whole
//    rows in flight before the wait, the first loop step in registers (as always) and the rest
//    copied to shared memory, each lane its own chunks (the same bits). For a GEMV launched with
//    overlap_previous behind a kernel that leaves memory idle: the batch-1 O projection behind
//    the split merge took 6.1–6.6 µs of a layer's critical path instead of 9.8–10.0 (the merge
//    grew by 1–2.5 µs, its loads now queue behind O's), 2026-12-04.
struct GemvLaunch {
  int rows_per_warp = 1;
  bool overlap_previous = false;
  bool prefetch_rows = false;
};

CudaStatus GemvBf16Cuda(const uint16_t* x, int64_t cols, const uint16_t* w, int64_t rows,
                        float* y, float beta, cudaStream_t stream, GemvLaunch launch = {});

// The same from an fp32 x [cols], which each CTA rounds to bf16 itself — after an RMSNorm
// with `norm_weight` [cols] (fp32) and `eps` when norm_weight is set. The staged x is bit for bit
// what FloatToBf16Cuda, or RmsNormCuda's bf16 output, would have given the GEMV (the same row
// functions, kernels/cuda/ops/row_transforms.cuh), so this saves a launch and a round trip at
// batch 1 without changing a bit of y.
bool GemvBf16FromF32Supports(int64_t cols, const void* x, const void* w, const void* norm_weight);
// cols ≤ 8192 (x lives in registers while it is staged), 16-byte aligned norm_weight (or null).
CudaStatus GemvBf16FromF32Cuda(const float* x, const float* norm_weight, float eps, int64_t cols,
                               const uint16_t* w, int64_t rows, float* y, float beta,
                               cudaStream_t stream, GemvLaunch launch = {});

// The same GEMV with the kernel that follows it at batch 1 folded into its epilogue: each warp
// computes the two rows one output element needs, so that kernel's launch and its round trip
// through memory go (x as in GemvBf16FromF32Cuda, the same constraints).
//
// act [ffn] = bf16(silu(g)·u) with [g; u] = W_gate_up [2·ffn, cols] · x: bit for bit
// GemvBf16FromF32Cuda into [g; u] followed by SwiGluCuda(…, out_bf16 = act).
CudaStatus GemvBf16SwiGluCuda(const float* x, const float* norm_weight, float eps, int64_t cols,
                              const uint16_t* w_gate_up, int64_t ffn, uint16_t* act,
                              cudaStream_t stream, bool overlap_previous = false);

// The fused QKV projection of one token, split and rotated: W_qkv [(Hq + 2·Hkv)·d, cols] holds
// the q heads' rows, then k's, then v's. q [Hq·d], k [Hkv·d], v [Hkv·d]; bias [(Hq + 2·Hkv)·d]
// (or null) is added before the rotation. Bit for bit GemvBf16FromF32Cuda into qkv, then
// AddBiasRowsCuda when there is a bias, then RopeSplitQkvCuda(n = 1) at *position (device).
// Like the weights, bias and *position must be final before the previous kernel on the stream
// starts when overlap_previous is set: each warp reads them, and computes its pair's rotation,
// before it waits for that kernel (off the critical path: 0.04–0.13 ms of the 8B batch-1 step).
struct GemvRopeSplitOut {
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  const float* bias = nullptr;
  const int64_t* position = nullptr;
  cuda_ops::RopeFreq freq;  // θ, and the model's RoPE scaling (rope_freq.h)
  bool interleaved = false;
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
};
// Which rows one launch computes. The batch-1 decode step splits the projection around the KV
// write: kKeysValues first (the write reads k and v), then kQueries launched to overlap the write.
// kQueries waits for the kernel before it only before its stores, so with overlap_previous it
// streams its weights and computes q while that kernel runs; the kernel before may then write q,
// k or v but not x, the weights, the bias or the position. Either way the launch completes only
// after the kernel before it has.
enum class RopeSplitRows { kAll, kKeysValues, kQueries };
// prefetch_rows: as GemvLaunch's.
CudaStatus GemvBf16RopeSplitCuda(const float* x, const float* norm_weight, float eps, int64_t cols,
                                 const uint16_t* w_qkv, const GemvRopeSplitOut& out,
                                 cudaStream_t stream, bool overlap_previous = false,
                                 RopeSplitRows part = RopeSplitRows::kAll, bool prefetch_rows = false);

}  // namespace witcert
