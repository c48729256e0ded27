// Row dots for the 32-element formats (Q4_0, Q4_1, Q8_0) against Q8_1x activations.
//
// Q4_1: <w, x> = Σ_b d_w·d_x·Σ q_w·q_x + m_w·s_x, with s_x = d_x·Σ q_x precomputed per block.
// Q4_0 is the same with m_w = -8·d_w (x = d·(q-8)), so both share one kernel and the 4-bit
// values stay unsigned for _mm256_maddubs_epi16 (15·127·2 < 2^15: no saturation).
// Q8_0 is signed × signed: |w| · sign(x, w) makes it unsigned × signed (127·127·2 < 2^15).
#include <cmath>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

inline float MinTerm(const BlockQ4_0& b) { return -8.0f * F16ToF32(b.d); }
inline float MinTerm(const BlockQ4_1& b) { return F16ToF32(b.m); }

template <typename Block>
void DotQ4Scalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                 float* out) {
  const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 32]
  for (int j = 0; j < nx; ++j) {
    const BlockQ8_1x* xb = reinterpret_cast<const BlockQ8_1x*>(x + j * stride);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQk; ++b) {
      int isum = 0;
      for (int i = 0; i < kQk / 2; ++i) {
        isum += (w[b].qs[i] & 0xF) * xb[b].qs[i] + (w[b].qs[i] >> 4) * xb[b].qs[i + kQk / 2];
      }
      sum = std::fma(F16ToF32(w[b].d) * xb[b].d, static_cast<float>(isum), sum);
      sum = std::fma(MinTerm(w[b]), xb[b].s, sum);
    }
    out[j] = sum;
  }
}

void DotQ8_0ScalarImpl(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx,
                       int64_t cols, float* out) {
  const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(w_row);  // [cols / 32]
  for (int j = 0; j < nx; ++j) {
    const BlockQ8_1x* xb = reinterpret_cast<const BlockQ8_1x*>(x + j * stride);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQk; ++b) {
      int isum = 0;
      for (int i = 0; i < kQk; ++i) isum += w[b].qs[i] * xb[b].qs[i];
      sum = std::fma(F16ToF32(w[b].d) * xb[b].d, static_cast<float>(isum), sum);
    }
    out[j] = sum;
  }
}

#ifdef WITCERT_MATMUL_AVX2
// Two accumulator chains (even / odd blocks) hide the FMA latency; with 18 blocks per row
// at hidden = 576 a single chain would bound the GEMV at ~4 cycles per block.
template <typename Block, int NX>
void DotQ4Avx2(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
  const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 32]
  const BlockQ8_1x* xb[NX];                                // NX × [cols / 32]
  __m256 acc[2][NX];
  float min_acc[2][NX];
  for (int j = 0; j < NX; ++j) {
    xb[j] = reinterpret_cast<const BlockQ8_1x*>(x + j * stride);
    acc[0][j] = acc[1][j] = _mm256_setzero_ps();
    min_acc[0][j] = min_acc[1][j] = 0.0f;
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  auto block = [&](int64_t b, int k) {
    const float dw = F16ToF32(w[b].d);
    const float mw = MinTerm(w[b]);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    // Bytes 0..15: low nibbles (elements 0..15); bytes 16..31: high nibbles (16..31).
    const __m256i wq =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low4);
    for (int j = 0; j < NX; ++j) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[j][b].qs));
      const __m256 p = _mm256_cvtepi32_ps(DotU8I8(wq, xq));
      acc[k][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb[j][b].d), p, acc[k][j]);
      min_acc[k][j] = std::fma(mw, xb[j][b].s, min_acc[k][j]);
    }
  };
  const int64_t nb = cols / kQk;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    block(b, 0);
    block(b + 1, 1);
  }
  if (b < nb) block(b, 0);
  for (int j = 0; j < NX; ++j) {
    out[j] = HSum(_mm256_add_ps(acc[0][j], acc[1][j])) + (min_acc[0][j] + min_acc[1][j]);
  }
}

template <int NX>
void DotQ8_0Avx2(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols,
                 float* out) {
  const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(w_row);  // [cols / 32]
  const BlockQ8_1x* xb[NX];                                        // NX × [cols / 32]
  __m256 acc[2][NX];
  for (int j = 0; j < NX; ++j) {
    xb[j] = reinterpret_cast<const BlockQ8_1x*>(x + j * stride);
    acc[0][j] = acc[1][j] = _mm256_setzero_ps();
  }
  auto block = [&](int64_t b, int k) {
    const float dw = F16ToF32(w[b].d);
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i wabs = _mm256_sign_epi8(wq, wq);
    for (int j = 0; j < NX; ++j) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[j][b].qs));
      const __m256 p = _mm256_cvtepi32_ps(DotU8I8(wabs, _mm256_sign_epi8(xq, wq)));
      acc[k][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb[j][b].d), p, acc[k][j]);
    }
  };
  const int64_t nb = cols / kQk;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    block(b, 0);
    block(b + 1, 1);
  }
  if (b < nb) block(b, 0);
  for (int j = 0; j < NX; ++j) out[j] = HSum(_mm256_add_ps(acc[0][j], acc[1][j]));
}

template <int NX> struct Q4_0K { static constexpr auto Run = DotQ4Avx2<BlockQ4_0, NX>; };
template <int NX> struct Q4_1K { static constexpr auto Run = DotQ4Avx2<BlockQ4_1, NX>; };
template <int NX> struct Q8_0K { static constexpr auto Run = DotQ8_0Avx2<NX>; };
#endif

}  // namespace

void DotQ4_0Scalar(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ4Scalar<BlockQ4_0>(w, x, s, nx, c, o);
}
void DotQ4_1Scalar(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ4Scalar<BlockQ4_1>(w, x, s, nx, c, o);
}
void DotQ8_0Scalar(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ8_0ScalarImpl(w, x, s, nx, c, o);
}

#ifdef WITCERT_MATMUL_AVX2
void DotQ4_0(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q4_0K>(w, x, s, nx, c, o);
}
void DotQ4_1(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q4_1K>(w, x, s, nx, c, o);
}
void DotQ8_0(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q8_0K>(w, x, s, nx, c, o);
}
#else
void DotQ4_0(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ4_0Scalar(w, x, s, nx, c, o);
}
void DotQ4_1(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ4_1Scalar(w, x, s, nx, c, o);
}
void DotQ8_0(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ8_0Scalar(w, x, s, nx, c, o);
}
#endif

}  // namespace witcert::matmul_internal
