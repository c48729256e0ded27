// Row dots for the 256-element K-quants (Q4_K, Q5_K, Q6_K) against Q8_Kx activations.
//
// Q4_K: <w, x> = Σ_blocks d·d_x·Σ_s sc_s·Σ q·q_x − dmin·d_x·Σ_s m_s·(Σ q_x over s); the
// second term needs only the activation's 16-element sums (bsums), never the int8 values.
// Q5_K is Q4_K with q ∈ [0, 31] (a fifth bit from qh): the same sums (8·63·31·127·32 ≈ 2^26),
// and maddubs stays unsigned × signed (31·127·2 < 2^15).
// Q6_K stores q + 32 in [0, 63], which keeps maddubs unsigned × signed (63·127·2 < 2^15);
// the +32 comes back out as 32·Σ_g sc_g·bsums_g. Per super-block integer sums stay below
// 2^31 (Q4_K: 8·63·15·127·32 ≈ 2^25; Q6_K: 16·128·63·127·16 ≈ 2^28).
#include <cmath>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

struct Q4KScales {
  uint8_t sc[8];
  uint8_t m[8];
};

inline Q4KScales UnpackQ4K(const uint8_t* scales) {  // Q4_K's or Q5_K's 12 scale bytes
  Q4KScales s;
  for (int j = 0; j < 8; ++j) Q4KScaleMin(scales, j, &s.sc[j], &s.m[j]);
  return s;
}

// Σ_s m_s · (bsums[2s] + bsums[2s+1]).
inline int Q4KMinSum(const Q4KScales& s, const BlockQ8_Kx& x) {
  int sum = 0;
  for (int j = 0; j < 8; ++j) sum += s.m[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  return sum;
}

// Σ_g scales[g] · bsums[g]: the contribution of Q6_K's +32 offset.
inline int Q6KOffsetSum(const BlockQ6_K& b, const BlockQ8_Kx& x) {
  int sum = 0;
  for (int g = 0; g < kQkK / 16; ++g) sum += b.scales[g] * x.bsums[g];
  return sum;
}

// Q4_K's and Q5_K's scalar dot (code: Q4KCode or Q5KCode, quant_blocks.h).
template <class Block, class Code>
void DotQ45KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out, Code code) {
  const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 256]
  for (int j = 0; j < nx; ++j) {
    const BlockQ8_Kx* xb = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      const Q4KScales s = UnpackQ4K(w[b].scales);
      int isum = 0;
      for (int c = 0; c < 4; ++c) {
        int lo = 0, hi = 0;
        for (int l = 0; l < 32; ++l) {
          lo += code(w[b], c, 0, l) * xb[b].qs[64 * c + l];
          hi += code(w[b], c, 1, l) * xb[b].qs[64 * c + 32 + l];
        }
        isum += s.sc[2 * c] * lo + s.sc[2 * c + 1] * hi;
      }
      sum = std::fma(F16ToF32(w[b].d) * xb[b].d, static_cast<float>(isum), sum);
      sum = std::fma(-F16ToF32(w[b].dmin) * xb[b].d, static_cast<float>(Q4KMinSum(s, xb[b])), sum);
    }
    out[j] = sum;
  }
}

}  // namespace

void DotQ4_KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out) {
  DotQ45KScalar<BlockQ4_K>(w_row, x, stride, nx, cols, out, Q4KCode);
}

void DotQ5_KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out) {
  DotQ45KScalar<BlockQ5_K>(w_row, x, stride, nx, cols, out, Q5KCode);
}

void DotQ6_KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out) {
  const BlockQ6_K* w = reinterpret_cast<const BlockQ6_K*>(w_row);  // [cols / 256]
  for (int j = 0; j < nx; ++j) {
    const BlockQ8_Kx* xb = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      int isum = 0;
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = w[b].ql + 64 * half;
        const uint8_t* qh = w[b].qh + 32 * half;
        const int8_t* sc = w[b].scales + 8 * half;
        const int8_t* xq = xb[b].qs + 128 * half;
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
          const int q2 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
          const int q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
          const int q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
          isum += sc[is] * q1 * xq[l] + sc[is + 2] * q2 * xq[l + 32] +
                  sc[is + 4] * q3 * xq[l + 64] + sc[is + 6] * q4 * xq[l + 96];
        }
      }
      isum -= 32 * Q6KOffsetSum(w[b], xb[b]);
      sum = std::fma(F16ToF32(w[b].d) * xb[b].d, static_cast<float>(isum), sum);
    }
    out[j] = sum;
  }
}

#ifdef WITCERT_MATMUL_AVX2
namespace {

// Q4_K and Q5_K (FIFTH: the block's qh bits give each value its bit 4).
template <class Block, bool FIFTH, int NX>
struct Q45KAvx2 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 256]
    const BlockQ8_Kx* xb[NX];                                // NX × [cols / 256]
    __m256 acc[NX];
    float min_acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
      acc[j] = _mm256_setzero_ps();
      min_acc[j] = 0.0f;
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      const Q4KScales s = UnpackQ4K(w[b].scales);
      __m256i qh = _mm256_setzero_si256();
      if constexpr (FIFTH) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh));
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, low4);                        // sub-block 2c
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);  // sub-block 2c+1
        if constexpr (FIFTH) {  // qh[l] bit 2c (low) and 2c + 1 (high), moved to bit 4
          const __m256i m_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
          const __m256i m_hi = _mm256_set1_epi8(static_cast<char>(2 << (2 * c)));
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m_lo), m_lo), bit4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m_hi), m_hi), bit4));
        }
        const __m256i sc_lo = _mm256_set1_epi16(s.sc[2 * c]);
        const __m256i sc_hi = _mm256_set1_epi16(s.sc[2 * c + 1]);
        for (int j = 0; j < NX; ++j) {
          const int8_t* xq = xb[j][b].qs + 64 * c;
          const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
          const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
          const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), sc_lo);
          const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), sc_hi);
          sumi[j] = _mm256_add_epi32(sumi[j], _mm256_add_epi32(p_lo, p_hi));
        }
      }
      const float d = F16ToF32(w[b].d);
      const float dmin = F16ToF32(w[b].dmin);
      for (int j = 0; j < NX; ++j) {
        acc[j] =
            _mm256_fmadd_ps(_mm256_set1_ps(d * xb[j][b].d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
        min_acc[j] =
            std::fma(dmin * xb[j][b].d, static_cast<float>(Q4KMinSum(s, xb[j][b])), min_acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j] = HSum(acc[j]) - min_acc[j];
  }
};
template <int NX>
using Q4KAvx2 = Q45KAvx2<BlockQ4_K, false, NX>;
template <int NX>
using Q5KAvx2 = Q45KAvx2<BlockQ5_K, true, NX>;

// 16 int16 lanes: the low 8 get scale a, the high 8 get scale b.
inline __m256i ScalePair(int8_t a, int8_t b) {
  return _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a));
}

template <int NX>
struct Q6KAvx2 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    const BlockQ6_K* w = reinterpret_cast<const BlockQ6_K*>(w_row);  // [cols / 256]
    const BlockQ8_Kx* xb[NX];                                        // NX × [cols / 256]
    __m256 acc[NX];
    float off_acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
      acc[j] = _mm256_setzero_ps();
      off_acc[j] = 0.0f;
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = w[b].ql + 64 * half;
        const int8_t* sc = w[b].scales + 8 * half;
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
        const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
        const __m256i qh =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * half));
        // q_k holds elements 32k .. 32k+31 of this half, each in [0, 63].
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(qa, low4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
            _mm256_or_si256(_mm256_and_si256(qb, low4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), low4),
                            _mm256_and_si256(qh, bits45)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
        };
        const __m256i scales[4] = {ScalePair(sc[0], sc[1]), ScalePair(sc[2], sc[3]),
                                   ScalePair(sc[4], sc[5]), ScalePair(sc[6], sc[7])};
        for (int j = 0; j < NX; ++j) {
          const int8_t* xq = xb[j][b].qs + 128 * half;
          for (int k = 0; k < 4; ++k) {
            const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * k));
            sumi[j] = _mm256_add_epi32(
                sumi[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xv), scales[k]));
          }
        }
      }
      const float d = F16ToF32(w[b].d);
      for (int j = 0; j < NX; ++j) {
        const float dd = d * xb[j][b].d;
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
        off_acc[j] =
            std::fma(dd, static_cast<float>(32 * Q6KOffsetSum(w[b], xb[j][b])), off_acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j] = HSum(acc[j]) - off_acc[j];
  }
};

}  // namespace

void DotQ4_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q4KAvx2>(w, x, s, nx, c, o);
}
void DotQ5_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q5KAvx2>(w, x, s, nx, c, o);
}
void DotQ6_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q6KAvx2>(w, x, s, nx, c, o);
}
#else
void DotQ4_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ4_KScalar(w, x, s, nx, c, o);
}
void DotQ5_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ5_KScalar(w, x, s, nx, c, o);
}
void DotQ6_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ6_KScalar(w, x, s, nx, c, o);
}
#endif

}  // namespace witcert::matmul_internal
