// Element-wise and row-wise transformer ops on the CPU (fp32).
#pragma once

#include <cstdint>

#include "kernels/cpu/quant_matrix.h"

namespace witcert {

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]²) + eps) * weight. x, out [n, dim]; may alias.
void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out);

// Rotates `x` [num_heads, head_dim] in place for position `pos`:
// pair i (i < head_dim/2) has angle pos · theta^(−2i/head_dim), divided by freq_factors[i] when
// given ([head_dim/2]: RoPE frequency scaling, engine/model/rope_scaling.h), and dims (2i, 2i+1)
// when `interleaved`, else (i, i + head_dim/2). attn_factor multiplies every cos and sin (yarn's
// attention factor; 1 leaves a pure rotation).
void ApplyRope(float* x, int64_t num_heads, int64_t head_dim, int64_t pos, float theta,
               bool interleaved, const float* freq_factors = nullptr, float attn_factor = 1.0f);
// The same in two steps, for callers that rotate many vectors at one position: the table
// cs [head_dim] = (cos, sin)·attn_factor of each pair's angle, then the rotation (same bits as
// ApplyRope).
void RopeCosSin(int64_t head_dim, int64_t pos, float theta, float* cs,
                const float* freq_factors = nullptr, float attn_factor = 1.0f);
void ApplyRopeTable(float* x, int64_t num_heads, int64_t head_dim, const float* cs,
                    bool interleaved);

// out[j] = silu(gate[j]) * up[j], j < n. out may alias gate.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// In-place numerically stable softmax over x[0, n) (vector_exp.h's exp, ≤ 2 ulp). A NaN
// entry makes every output NaN; all entries −inf gives the uniform distribution.
void Softmax(float* x, int64_t n);

// Σ a[i]·b[i] in fp32 (8 lanes of FMAs, then the lanes in a fixed order).
float Dot(const float* a, const float* b, int64_t n);

// out[j] = Dot(q, rows + j·stride, d)·scale for j < n: four rows at a time where the build has
// AVX2 and d % 8 == 0 (each row's eight lanes are then summed as a tree instead of a chain,
// the same tree for every row, so a row's value does not depend on how rows are grouped).
void DotRows(const float* q, const float* rows, int64_t stride, int64_t n, int64_t d, float scale,
             float* out);

// acc [d] += Σ_j w[j]·row_j for rows row_j = rows + j·stride, j < n: one fma per element, in
// row order (so the result does not depend on how a caller splits the rows into runs), the
// accumulators in registers.
void AccumulateRows(const float* w, const float* rows, int64_t stride, int64_t n, int64_t d,
                    float* acc);

// out [hidden] = dequantized row `token` of the embedding table.
void EmbeddingLookup(const QuantMatrix& table, int32_t token, float* out);

// y += x, n elements.
void AddInPlace(float* y, const float* x, int64_t n);

}  // namespace witcert
