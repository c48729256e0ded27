// Row-wise and element-wise transformer ops in fp32.
//
// These are a few percent of a decode step next to the matmuls, so they favour clarity:
// reductions accumulate in double, and RoPE computes each angle pos·θ^(−2i/d) in double
// before cos/sin, so rotations stay accurate at large positions (a float angle at
// pos = 10^5 would already be off by ~10^-2 rad). No global tables: a position's cos/sin
// table is head_dim entries the caller keeps (the CPU backend builds one per token and
// reuses it in every layer, for Q and K). SwiGLU's exp is vector_exp.h's (≤ 2 ulp).
#include "kernels/cpu/transformer_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/vector_exp.h"

namespace witcert {

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * dim;  // [dim]
    float* oi = out + i * dim;      // [dim]
    double ss = 0.0;
    for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t j = 0; j < dim; ++j) oi[j] = xi[j] * scale * weight[j];
  }
}

void RopeCosSin(int64_t head_dim, int64_t pos, float theta, float* cs, const float* freq_factors,
                float attn_factor) {
  const double magnitude = attn_factor;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    double inv_freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
    if (freq_factors != nullptr) inv_freq /= static_cast<double>(freq_factors[i]);
    const double angle = static_cast<double>(pos) * inv_freq;
    cs[2 * i] = static_cast<float>(std::cos(angle) * magnitude);
    cs[2 * i + 1] = static_cast<float>(std::sin(angle) * magnitude);
  }
}

void ApplyRope(float* x, int64_t num_heads, int64_t head_dim, int64_t pos, float theta,
               bool interleaved, const float* freq_factors, float attn_factor) {
  std::vector<float> cs(static_cast<size_t>(head_dim));  // [half, 2]: cos, sin per pair
  RopeCosSin(head_dim, pos, theta, cs.data(), freq_factors, attn_factor);
  ApplyRopeTable(x, num_heads, head_dim, cs.data(), interleaved);
}

void ApplyRopeTable(float* x, int64_t num_heads, int64_t head_dim, const float* cs,
                    bool interleaved) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* xh = x + h * head_dim;  // [head_dim]
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = interleaved ? 2 * i : i;
      const int64_t b = interleaved ? 2 * i + 1 : i + half;
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float xa = xh[a], xb = xh[b];
      xh[a] = xa * c - xb * s;
      xh[b] = xa * s + xb * c;
    }
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  constexpr int64_t kChunk = 256;
  float e[kChunk];  // e^{−g} of the chunk
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n - j0);
    ExpShifted(gate + j0, len, 0.0f, -1.0f, e);
    for (int64_t j = 0; j < len; ++j) out[j0 + j] = gate[j0 + j] / (1.0f + e[j]) * up[j0 + j];
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float max = MaxValue(x, n);  // NaNs ignored (then they propagate through the sum)
  if (std::isinf(max) && max < 0) {  // every entry -inf: no preference, return uniform
    for (int64_t j = 0; j < n; ++j) x[j] = 1.0f / static_cast<float>(n);
    return;
  }
  const double sum = ExpShiftedSum(x, n, max, 1.0f, x);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
}

float Dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#ifdef __AVX2__
  if (n >= 8) {
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8)
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (float l : lanes) sum += l;  // fixed order: reproducible
  }
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

#ifdef __AVX2__
namespace {

// acc [8J] += Σ_j w_j·row_j[0, 8J), accumulators in registers.
template <int J>
inline void AccumulateSlab(const float* w, const float* rows, int64_t stride, int64_t n,
                           float* acc) {
  __m256 a[J];
  for (int j = 0; j < J; ++j) a[j] = _mm256_loadu_ps(acc + 8 * j);
  for (int64_t t = 0; t < n; ++t) {
    const __m256 wt = _mm256_set1_ps(w[t]);
    const float* row = rows + t * stride;
    for (int j = 0; j < J; ++j) a[j] = _mm256_fmadd_ps(wt, _mm256_loadu_ps(row + 8 * j), a[j]);
  }
  for (int j = 0; j < J; ++j) _mm256_storeu_ps(acc + 8 * j, a[j]);
}

// AccumulateSlab<J> for J = 1..8, indexed by J − 1.
template <int... J>
constexpr auto AccumulateSlabs(std::integer_sequence<int, J...>) {
  return std::array<void (*)(const float*, const float*, int64_t, int64_t, float*), sizeof...(J)>{
      &AccumulateSlab<J + 1>...};
}
constexpr auto kAccumulateSlabs = AccumulateSlabs(std::make_integer_sequence<int, 8>{});

}  // namespace
#endif

void DotRows(const float* q, const float* rows, int64_t stride, int64_t n, int64_t d, float scale,
             float* out) {
  int64_t j = 0;
#ifdef __AVX2__
  if (d % 8 == 0) {
    for (; j + 4 <= n; j += 4) {
      const float* k = rows + j * stride;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t c = 0; c < d; c += 8) {
        const __m256 qc = _mm256_loadu_ps(q + c);
        s0 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + c), s0);
        s1 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + stride + c), s1);
        s2 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + 2 * stride + c), s2);
        s3 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + 3 * stride + c), s3);
      }
      _mm_storeu_ps(out + j,
                    _mm_mul_ps(matmul_internal::LaneSums4(s0, s1, s2, s3), _mm_set1_ps(scale)));
    }
    // The tail rows take the same fma chains and the same lane tree, so a row's score does
    // not depend on where a run of rows starts (a cached prefix splits the keys into two).
    const __m256 zero = _mm256_setzero_ps();
    for (; j < n; ++j) {
      const float* k = rows + j * stride;
      __m256 s0 = zero;
      for (int64_t c = 0; c < d; c += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(k + c), s0);
      out[j] = _mm_cvtss_f32(matmul_internal::LaneSums4(s0, zero, zero, zero)) * scale;
    }
    return;
  }
#endif
  for (; j < n; ++j) out[j] = Dot(q, rows + j * stride, d) * scale;
}

void AccumulateRows(const float* w, const float* rows, int64_t stride, int64_t n, int64_t d,
                    float* acc) {
  int64_t c = 0;
#ifdef __AVX2__
  if (d % 8 == 0) {
    // Slabs of up to 64 channels (eight accumulator registers).
    for (; c < d; c += 64) {
      kAccumulateSlabs[std::min<int64_t>(64, d - c) / 8 - 1](w, rows + c, stride, n, acc + c);
    }
    return;
  }
#endif
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = c; k < d; ++k) acc[k] = std::fma(w[t], rows[t * stride + k], acc[k]);
  }
}

void EmbeddingLookup(const QuantMatrix& table, int32_t token, float* out) {
  if (token < 0 || token >= table.rows) {  // precondition violated: make it visible
    for (int64_t j = 0; j < table.cols; ++j) out[j] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  DequantizeRow(table, token, out);
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += x[j];
}

}  // namespace witcert
