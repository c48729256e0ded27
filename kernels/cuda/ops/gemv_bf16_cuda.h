// y [rows] = W [rows, cols] · x [cols] + beta · y, with bf16 x and W, fp32 accumulation and
// output: the single-row GEMM of a batch-1 decode step (QKV, O, gate|up, down, the head).
//
// Why: for n = 1 cuBLAS ran the 8B model's O projection (4096 × 4096) as a split-K GEMM plus a
// reduction kernel, 13.2 + 3.8 µs (2.5 TB/s); this kernel takes 14.2 µs (ncu, H200). On the other
// shapes it measured no better or worse (QKV 18.9 vs 18.5 µs; gate|up 65.9 vs 60.3; down, rows of
// 14336, 38.6 vs 35.5): one warp per row leaves long rows with too few warps. So CudaBackend
// uses it only for rows ≤ cols ≤ 8192. Structure: one warp per output row, 16-byte weight loads,
// four in flight per lane, x staged once per CTA in shared memory (so the L2 sees x once per 8
// rows, not once per row).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"

namespace witcert {

// True when GemvBf16Cuda takes this shape: cols % 8 == 0, cols ≤ 24576 (x fits shared
// memory), 16-byte aligned x and W.
bool GemvBf16Supports(int64_t cols, const void* x, const void* w);

CudaStatus GemvBf16Cuda(const uint16_t* x, int64_t cols, const uint16_t* w, int64_t rows,
                        float* y, float beta, cudaStream_t stream);

}  // namespace witcert
