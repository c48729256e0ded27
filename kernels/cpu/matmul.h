// y = x · Wᵀ for W in any supported GGML block format, on the CPU.
//
// Math: y[i, r] = Σ_c x[i, c] · W[r, c]. Shapes: x [n, cols] fp32 row-major, W [rows, cols]
// (QuantMatrix), y [n, rows] fp32. Preconditions: cols == W.cols, cols a multiple of the
// format's block size.
//
// Quantized formats follow GGML's practice: the activation rows are quantized once per call
// to 8-bit blocks (Q8_0/Q8_1 for 32-blocks, Q8_K for K-quants) and the dot products run in
// integer SIMD. The scalar reference (MatmulReference) dequantizes W to fp32 and multiplies
// in double; tests compare the two.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant_matrix.h"

namespace witcert {

class ThreadPool;

// `pool` may be null (single thread). Rows of W are split across threads.
void Matmul(const float* x, int64_t n, const QuantMatrix& w, float* y, ThreadPool* pool);

// y_k = x · W_kᵀ for several matrices that read the same activations (Q/K/V, gate/up):
// the activations are quantized once and the rows of all matrices share one parallel pass.
// Results are bit-identical to separate Matmul calls. ws[k] [rows_k, cols], ys[k] [n, rows_k].
// Matrices of different type or width fall back to separate calls.
void MatmulMany(const float* x, int64_t n, const QuantMatrix* const* ws, float* const* ys,
                int count, ThreadPool* pool);

// Plain reference: dequantize each row, accumulate in double.
void MatmulReference(const float* x, int64_t n, const QuantMatrix& w, float* y);

// Dequantizes row `r` of `w` into `out` [w.cols].
void DequantizeRow(const QuantMatrix& w, int64_t r, float* out);
// Dequantizes `count` values of `type` from `src` into `out` (count % block_elems == 0).
void DequantizeValues(GgmlType type, const uint8_t* src, int64_t count, float* out);

}  // namespace witcert
