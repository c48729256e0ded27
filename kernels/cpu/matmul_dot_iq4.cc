// Row dots for IQ4_NL (32-element blocks, Q8_1Row activations) and IQ4_XS (256-element
// super-blocks of eight 32-element sub-blocks, BlockQ8_Kx activations): 4-bit indices into the
// non-linear grid kIq4Values (quant_blocks.h).
//
// The grid values are signed, so the AVX2 kernels look them up with pshufb and feed
// |w| and sign(x, w) to maddubs (127·127·2 < 2^15), as the Q8_0 kernel does. Neither format
// carries a min: <w, x> = Σ d_w·d_x·(scale)·Σ k[q]·q_x. IQ4_XS's per-block integer sum stays
// below 8·32·32·127·127 ≈ 2^27. One AVX2 kernel serves every SIMD variant.
#include <cmath>

#include "kernels/cpu/matmul_dot_block32.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

// Σ_l k[q_l]·x_l over the 32 elements of one IQ4 sub-block (qs [16]: low nibbles first).
inline int Iq4SubBlockDot(const uint8_t* qs, const int8_t* x) {
  int s = 0;
  for (int l = 0; l < 16; ++l) s += kIq4Values[qs[l] & 0xF] * x[l] + kIq4Values[qs[l] >> 4] * x[16 + l];
  return s;
}

#ifdef WITCERT_MATMUL_AVX2
// The 32 grid values of one sub-block (low nibbles, then high) as int8 lanes.
inline __m256i Iq4Values(const uint8_t* qs) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values));
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(raw, low4));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(raw, 4), low4));
  return _mm256_set_m128i(hi, lo);
}
// 8 int32 lanes of Σ w·x for signed w, x (|w| ≤ 127).
inline __m256i DotI8I8(__m256i w, __m256i x) {
  return DotU8I8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

struct Iq4NlFormat {
  using Block = BlockIQ4_NL;
  static constexpr bool kHasMin = false;
  static __m256i Prepare(const BlockIQ4_NL& b) { return Iq4Values(b.qs); }
  static __m256i Lanes(__m256i v, __m256i x) { return DotI8I8(v, x); }
  static float MinTerm(const BlockIQ4_NL&) { return 0.0f; }
};
template <int NX>
using Iq4NlAvx2 = Block32Avx2<Iq4NlFormat, NX>;

template <int NX>
struct Iq4XsAvx2 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    const BlockIQ4_XS* w = reinterpret_cast<const BlockIQ4_XS*>(w_row);  // [cols / 256]
    const BlockQ8_Kx* xb[NX];                                            // NX × [cols / 256]
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) {
      xb[j] = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
      acc[j] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int sb = 0; sb < kQkK / 32; ++sb) {
        const __m256i v = Iq4Values(w[b].qs + 16 * sb);
        // The sub-block scale rides in madd's second operand: |w·x pair sums| ≤ 32258 and |scale| ≤ 32.
        const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(Iq4XsScale(w[b], sb)));
        const __m256i wabs = _mm256_sign_epi8(v, v);
        for (int j = 0; j < NX; ++j) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[j][b].qs + 32 * sb));
          const __m256i pairs = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv, v));
          sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(pairs, scale));
        }
      }
      const float d = F16ToF32(w[b].d);
      for (int j = 0; j < NX; ++j) {
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb[j][b].d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) out[j] = HSum(acc[j]);
  }
};
#endif

}  // namespace

void DotIQ4_NLScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols, float* out) {
  const BlockIQ4_NL* w = reinterpret_cast<const BlockIQ4_NL*>(w_row);  // [cols / 32]
  for (int j = 0; j < nx; ++j) {
    const Q8_1Row xr = ViewQ8_1Row(x + j * stride, cols);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQk; ++b) {
      const int isum = Iq4SubBlockDot(w[b].qs, xr.qs + b * kQk);
      sum = std::fma(F16ToF32(w[b].d) * xr.d[b], static_cast<float>(isum), sum);
    }
    out[j] = sum;
  }
}

void DotIQ4_XSScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols, float* out) {
  const BlockIQ4_XS* w = reinterpret_cast<const BlockIQ4_XS*>(w_row);  // [cols / 256]
  for (int j = 0; j < nx; ++j) {
    const BlockQ8_Kx* xb = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      int isum = 0;
      for (int sb = 0; sb < kQkK / 32; ++sb) {
        isum += Iq4XsScale(w[b], sb) * Iq4SubBlockDot(w[b].qs + 16 * sb, xb[b].qs + 32 * sb);
      }
      sum = std::fma(F16ToF32(w[b].d) * xb[b].d, static_cast<float>(isum), sum);
    }
    out[j] = sum;
  }
}

#ifdef WITCERT_MATMUL_AVX2
void DotIQ4_NL(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Iq4NlAvx2>(w, x, s, nx, c, o);
}
void DotIQ4_XS(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Iq4XsAvx2>(w, x, s, nx, c, o);
}
#else
void DotIQ4_NL(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotIQ4_NLScalar(w, x, s, nx, c, o);
}
void DotIQ4_XS(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotIQ4_XSScalar(w, x, s, nx, c, o);
}
#endif

}  // namespace witcert::matmul_internal
