// AVX512-VNNI build of the 32-element format dots: two blocks per 512-bit vector.
//
// Bit-identity with the AVX2 kernel (matmul_dot_q4_tile256.h) by construction: that kernel
// keeps two 8-lane fp32 chains per activation row, even blocks in one and odd blocks in the
// other. Here one 16-lane accumulator holds both (low half = even chain, high half = odd
// chain), and each step feeds it blocks 2p (low) and 2p+1 (high) with the same per-lane
// operands: the same exact int32 lane sums (vpdpbusd adds the same 4 products per lane as
// maddubs + madd), the same d_w·d_x scale, one FMA. The last nb % 8 blocks and the final
// reduction then run on the two halves exactly as the AVX2 kernel does.
//
// Speed: per activation row and block pair this is load + dpbusd + cvt + permute + FMA,
// against 2 × (maddubs + madd + cvt + broadcast + FMA) in AVX2, so the compute-bound batched
// case (n >= 8) gains most; 32 vector registers also allow 8-row tiles, halving the
// per-row share of weight unpacking. Q8_0 has no 512-bit sign_epi8, so x is negated under
// the mask of negative weights instead (the same products: |w|·(±x)).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

#ifdef WITCERT_MATMUL_AVX512
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12's AVX-512 intrinsics seed results with _mm512_undefined_*(), which its own
// -Wuninitialized then reports once per inlined use; the warnings are false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/matmul_dot_q4_tile256.h"

namespace witcert::matmul_internal {
namespace {

// 256-bit lane sums for the tail blocks (EVEX vpdpbusd).
struct Avx512IntDot {
  static __m256i Lanes(__m256i u, __m256i i) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, i);
  }
};

// Blocks b0 and b1 as 64 bytes in element order: [b0 elements 0..31 | b1 elements 0..31].
template <Fmt F>
inline __m512i WeightPair(const typename Traits<F>::Block& b0,
                          const typename Traits<F>::Block& b1) {
  if constexpr (F == Fmt::kQ8_0) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0.qs));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1.qs));
    return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1);
  } else {
    // [qs0 qs0 qs1 qs1] by 128-bit lanes, then the 2nd and 4th lanes shifted to the high nibbles.
    const __m256i a =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0.qs)));
    const __m256i b =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b1.qs)));
    __m512i v = _mm512_inserti64x4(_mm512_zextsi256_si512(a), b, 1);
    v = _mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4);  // 16-bit lanes 8..15 and 24..31
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
  }
}

template <Fmt F, int NX>
struct DotTile512 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    using Block = typename Traits<F>::Block;
    constexpr bool kHasMin = F != Fmt::kQ8_0;
    const Block* w = reinterpret_cast<const Block*>(w_row);  // [nb]
    const int64_t nb = cols / kQk;
    Q8_1Row xr[NX];
    __m512 acc[NX];      // [even-block chain | odd-block chain]
    __m256 min_acc[NX];  // Σ m_w·s_x over full groups of 8 blocks
    float min_tail[NX];  // and over the last nb % 8 blocks
    for (int j = 0; j < NX; ++j) {
      xr[j] = ViewQ8_1Row(x + j * stride, cols);
      acc[j] = _mm512_setzero_ps();
      min_acc[j] = _mm256_setzero_ps();
      min_tail[j] = 0.0f;
    }
    // pick[p]: lanes 0..7 take scale 2p, lanes 8..15 scale 2p + 1.
    __m512i pick[4];
    for (int p = 0; p < 4; ++p) {
      pick[p] = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
    }
    int64_t g = 0;
    for (; g + 8 <= nb; g += 8) {
      __m256 dw, mw;
      HeadScales<F>(w + g, &dw, &mw);
      __m512 scale[NX];  // d_w·d_x of the group's 8 blocks in lanes 0..7
      for (int j = 0; j < NX; ++j) {
        scale[j] = _mm512_zextps256_ps512(_mm256_mul_ps(dw, _mm256_loadu_ps(xr[j].d + g)));
      }
      if constexpr (kHasMin) {
        for (int j = 0; j < NX; ++j) {
          min_acc[j] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xr[j].s + g), min_acc[j]);
        }
      }
      for (int p = 0; p < 4; ++p) {
        const int64_t b = g + 2 * p;
        const __m512i wq = WeightPair<F>(w[b], w[b + 1]);
        __m512i wu = wq;
        __mmask64 neg = 0;
        if constexpr (F == Fmt::kQ8_0) {
          wu = _mm512_abs_epi8(wq);  // -128 → 0x80, read as unsigned 128
          neg = _mm512_movepi8_mask(wq);
        }
        for (int j = 0; j < NX; ++j) {
          __m512i xv = _mm512_loadu_si512(xr[j].qs + b * kQk);
          if constexpr (F == Fmt::kQ8_0) {
            xv = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
          }
          const __m512 prod =
              _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wu, xv));
          acc[j] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick[p], scale[j]), prod, acc[j]);
        }
      }
    }
    __m256 even[NX], odd[NX];
    for (int j = 0; j < NX; ++j) {
      even[j] = _mm512_castps512_ps256(acc[j]);
      odd[j] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[j]), 1));
    }
    for (int64_t b = g; b < nb; ++b) {  // the last nb % 8 blocks, as in the AVX2 kernel
      const float dw = F16ToF32(w[b].d);
      const __m256i wq = WeightBlock<F>(w[b]);
      for (int j = 0; j < NX; ++j) {
        const __m256 p = BlockDot<F, Avx512IntDot>(wq, xr[j].qs + b * kQk);
        even[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[j].d[b]), p, even[j]);
        if constexpr (kHasMin) min_tail[j] = std::fma(MinTerm(w[b]), xr[j].s[b], min_tail[j]);
      }
    }
    for (int j = 0; j < NX; ++j) {
      float sum = HSum(_mm256_add_ps(even[j], odd[j]));
      if constexpr (kHasMin) sum += HSum(min_acc[j]) + min_tail[j];
      out[j] = sum;
    }
  }
};

// Calls K::Run for tile widths 1..kMaxWideTile.
template <template <int> class K>
void DispatchWideTile(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                      float* out) {
  DispatchTileUpTo<kMaxWideTile, K>(w_row, x, stride, nx, cols, out);
}

template <int NX>
struct Q4_0W : DotTile512<Fmt::kQ4_0, NX> {};
template <int NX>
struct Q4_1W : DotTile512<Fmt::kQ4_1, NX> {};
template <int NX>
struct Q8_0W : DotTile512<Fmt::kQ8_0, NX> {};

}  // namespace

void DotQ4_0Avx512(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchWideTile<Q4_0W>(w, x, s, nx, c, o);
}
void DotQ4_1Avx512(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchWideTile<Q4_1W>(w, x, s, nx, c, o);
}
void DotQ8_0Avx512(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchWideTile<Q8_0W>(w, x, s, nx, c, o);
}

}  // namespace witcert::matmul_internal
#pragma GCC diagnostic pop
#pragma GCC pop_options
#else
namespace witcert::matmul_internal {
// Not built: never selected (CpuKernelAvailable is false); defined so the table links.
// Callers may pass nx up to kMaxWideTile, so split into 256-bit kernel tiles.
void DotQ4_0Avx512(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  for (int t = 0; t < nx; t += kMaxTile)
    DotQ4_0(w, x + t * s, s, nx - t < kMaxTile ? nx - t : kMaxTile, c, o + t);
}
void DotQ4_1Avx512(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  for (int t = 0; t < nx; t += kMaxTile)
    DotQ4_1(w, x + t * s, s, nx - t < kMaxTile ? nx - t : kMaxTile, c, o + t);
}
void DotQ8_0Avx512(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  for (int t = 0; t < nx; t += kMaxTile)
    DotQ8_0(w, x + t * s, s, nx - t < kMaxTile ? nx - t : kMaxTile, c, o + t);
}
}  // namespace witcert::matmul_internal
#endif
