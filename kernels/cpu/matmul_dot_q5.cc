// Row dots for Q5_0 and Q5_1 (32-element blocks with a fifth bit per value) against Q8_1Row
// activations.
//
// As Q4_0 / Q4_1 (matmul_dot_q4.cc): <w, x> = Σ_b d_w·d_x·Σ q_w·q_x + m_w·s_x with s_x = d_x·Σ q_x,
// m_w = −16·d_w for Q5_0 (x = d·(q − 16)) and m_w = m for Q5_1. q ∈ [0, 31] stays unsigned for
// maddubs (31·127·2 < 2^15). One AVX2 kernel serves every SIMD variant: these files are rare
// next to Q4_K / Q5_K, and their speed is not tuned like Q4_0's.
#include <cmath>

#include "kernels/cpu/matmul_dot_block32.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

inline float Q5MinTerm(const BlockQ5_0& b) { return -16.0f * F16ToF32(b.d); }
inline float Q5MinTerm(const BlockQ5_1& b) { return F16ToF32(b.m); }

template <class Block>
void DotQ5Scalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols, float* out) {
  const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 32]
  for (int j = 0; j < nx; ++j) {
    const Q8_1Row xr = ViewQ8_1Row(x + j * stride, cols);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQk; ++b) {
      int isum = 0;
      const uint32_t qh = Q5HighBits(w[b]);
      for (int i = 0; i < kQk; ++i) isum += Q5Code(w[b], qh, i) * xr.qs[b * kQk + i];
      sum = std::fma(F16ToF32(w[b].d) * xr.d[b], static_cast<float>(isum), sum);
      sum = std::fma(Q5MinTerm(w[b]), xr.s[b], sum);
    }
    out[j] = sum;
  }
}

#ifdef WITCERT_MATMUL_AVX2
// The 32 codes of a block as bytes: nibbles (low ones then high ones, the element order), and
// bit j of qh moved to bit 4 of byte j (byte j takes qh's byte j / 8, tests bit j % 8).
template <class Block>
inline __m256i Q5Codes(const Block& b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m256i nibbles = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(Q5HighBits(b))),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(nibbles, high);
}

template <class B>
struct Q5Format {
  using Block = B;
  static constexpr bool kHasMin = true;
  static __m256i Prepare(const B& b) { return Q5Codes(b); }
  static __m256i Lanes(__m256i u, __m256i x) { return DotU8I8(u, x); }  // u ∈ [0, 31]
  static float MinTerm(const B& b) { return Q5MinTerm(b); }
};
template <int NX>
using Q5_0Avx2 = Block32Avx2<Q5Format<BlockQ5_0>, NX>;
template <int NX>
using Q5_1Avx2 = Block32Avx2<Q5Format<BlockQ5_1>, NX>;
#endif

}  // namespace

void DotQ5_0Scalar(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ5Scalar<BlockQ5_0>(w, x, s, nx, c, o);
}
void DotQ5_1Scalar(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ5Scalar<BlockQ5_1>(w, x, s, nx, c, o);
}

#ifdef WITCERT_MATMUL_AVX2
void DotQ5_0(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q5_0Avx2>(w, x, s, nx, c, o);
}
void DotQ5_1(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q5_1Avx2>(w, x, s, nx, c, o);
}
#else
void DotQ5_0(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ5_0Scalar(w, x, s, nx, c, o);
}
void DotQ5_1(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ5_1Scalar(w, x, s, nx, c, o);
}
#endif

}  // namespace witcert::matmul_internal
