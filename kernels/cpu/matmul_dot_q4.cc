// Row dots for the 32-element formats (Q4_0, Q4_1, Q8_0) against Q8_1Row activations.
//
// Q4_1: <w, x> = Σ_b d_w·d_x·Σ q_w·q_x + m_w·s_x, with s_x = d_x·Σ q_x precomputed per block.
// Q4_0 is the same with m_w = -8·d_w (x = d·(q-8)), so both share one kernel and the 4-bit
// values stay unsigned for _mm256_maddubs_epi16 (15·127·2 < 2^15: no saturation).
// Q8_0 is signed × signed: |w| · sign(x, w) makes it unsigned × signed (127·127·2 < 2^15).
//
// Speed: the decode GEMV is bound by instructions per block, not by the integer dot itself.
// Converting each block's fp16 scale (and min) one at a time cost ~8 of ~24 uops per block,
// so the AVX2 kernels convert 8 blocks' scales at once, multiply them by the 8 activation
// scales in one vector op, and fold the min term in as one vector FMA per 8 blocks (the
// last nb % 8 blocks take the one-at-a-time path). Two accumulator chains (even / odd
// blocks) hide the FMA latency. This took the hot [576->1536] GEMV from ~60 to ~50 µs.
#include <cmath>
#include <cstring>

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
    const Q8_1Row xr = ViewQ8_1Row(x + j * stride, cols);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQk; ++b) {
      const int8_t* xq = xr.qs + b * kQk;
      int isum = 0;
      for (int i = 0; i < kQk / 2; ++i) {
        isum += (w[b].qs[i] & 0xF) * xq[i] + (w[b].qs[i] >> 4) * xq[i + kQk / 2];
      }
      sum = std::fma(F16ToF32(w[b].d) * xr.d[b], static_cast<float>(isum), sum);
      sum = std::fma(MinTerm(w[b]), xr.s[b], sum);
    }
    out[j] = sum;
  }
}

void DotQ8_0ScalarImpl(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                       float* out) {
  const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(w_row);  // [cols / 32]
  for (int j = 0; j < nx; ++j) {
    const Q8_1Row xr = ViewQ8_1Row(x + j * stride, cols);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQk; ++b) {
      int isum = 0;
      for (int i = 0; i < kQk; ++i) isum += w[b].qs[i] * xr.qs[b * kQk + i];
      sum = std::fma(F16ToF32(w[b].d) * xr.d[b], static_cast<float>(isum), sum);
    }
    out[j] = sum;
  }
}

#ifdef WITCERT_MATMUL_AVX2
enum class Fmt { kQ4_0, kQ4_1, kQ8_0 };

template <Fmt F>
struct Traits;
template <>
struct Traits<Fmt::kQ4_0> {
  using Block = BlockQ4_0;
};
template <>
struct Traits<Fmt::kQ4_1> {
  using Block = BlockQ4_1;
};
template <>
struct Traits<Fmt::kQ8_0> {
  using Block = BlockQ8_0;
};

// The first 4 bytes of 8 consecutive blocks: fp16 d in the low half of each lane (and, for
// Q4_1, fp16 m in the high half). Copied through a small array: on the dev machine this ran
// ~2x faster than _mm256_setr_epi32 of the same loads and ~8% faster than a gather.
template <typename Block>
inline __m256i LoadHeads(const Block* w) {
  int32_t h[8];
  for (int k = 0; k < 8; ++k) std::memcpy(&h[k], &w[k], 4);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
}

// The 32 weights of a block as bytes in element order (4-bit formats: unsigned 0..15).
template <Fmt F>
inline __m256i WeightBlock(const typename Traits<F>::Block& blk) {
  if constexpr (F == Fmt::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
  } else {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
    // Bytes 0..15: low nibbles (elements 0..15); bytes 16..31: high nibbles (16..31).
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed),
                            _mm256_set1_epi8(0x0F));
  }
}

// Σ w·x of one block as 8 float lanes (exact integer sums converted to fp32).
template <Fmt F>
inline __m256 BlockDot(__m256i wq, const int8_t* xq) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  if constexpr (F == Fmt::kQ8_0) {
    return _mm256_cvtepi32_ps(DotU8I8(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq)));
  } else {
    return _mm256_cvtepi32_ps(DotU8I8(wq, xv));
  }
}

template <Fmt F, int NX>
struct DotAvx2 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    using Block = typename Traits<F>::Block;
    constexpr bool kHasMin = F != Fmt::kQ8_0;
    const Block* w = reinterpret_cast<const Block*>(w_row);  // [nb]
    const int64_t nb = cols / kQk;
    Q8_1Row xr[NX];
    __m256 acc[2][NX];
    __m256 min_acc[NX];  // Σ m_w·s_x over full groups of 8 blocks
    float min_tail[NX];  // and over the last nb % 8 blocks
    for (int j = 0; j < NX; ++j) {
      xr[j] = ViewQ8_1Row(x + j * stride, cols);
      acc[0][j] = acc[1][j] = min_acc[j] = _mm256_setzero_ps();
      min_tail[j] = 0.0f;
    }
    alignas(32) float scale[NX][8];  // d_w·d_x for the current group of blocks
    int64_t g = 0;
    for (; g + 8 <= nb; g += 8) {
      const __m256i heads = LoadHeads(w + g);
      const __m256i lo = _mm256_and_si256(heads, _mm256_set1_epi32(0xFFFF));
      // [d0..d3 m0..m3 | d4..d7 m4..m7] → [d0..d7 | m0..m7]
      const __m256i dm =
          _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, _mm256_srli_epi32(heads, 16)), 0xD8);
      const __m256 dw = _mm256_cvtph_ps(_mm256_castsi256_si128(dm));
      for (int j = 0; j < NX; ++j) {
        _mm256_store_ps(scale[j], _mm256_mul_ps(dw, _mm256_loadu_ps(xr[j].d + g)));
      }
      if constexpr (kHasMin) {
        const __m256 mw = F == Fmt::kQ4_1 ? _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1))
                                          : _mm256_mul_ps(dw, _mm256_set1_ps(-8.0f));
        for (int j = 0; j < NX; ++j) {
          min_acc[j] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xr[j].s + g), min_acc[j]);
        }
      }
      // Even blocks feed acc[0], odd ones acc[1] (constant indices keep them in registers).
      auto block = [&](int k, __m256* chain) {
        const __m256i wq = WeightBlock<F>(w[g + k]);
        for (int j = 0; j < NX; ++j) {
          const __m256 p = BlockDot<F>(wq, xr[j].qs + (g + k) * kQk);
          chain[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[j][k]), p, chain[j]);
        }
      };
      for (int k = 0; k < 8; k += 2) {
        block(k, acc[0]);
        block(k + 1, acc[1]);
      }
    }
    for (int64_t b = g; b < nb; ++b) {  // the last nb % 8 blocks, one scale at a time
      const float dw = F16ToF32(w[b].d);
      const __m256i wq = WeightBlock<F>(w[b]);
      for (int j = 0; j < NX; ++j) {
        const __m256 p = BlockDot<F>(wq, xr[j].qs + b * kQk);
        acc[0][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[j].d[b]), p, acc[0][j]);
        if constexpr (kHasMin) min_tail[j] = std::fma(MinTerm(w[b]), xr[j].s[b], min_tail[j]);
      }
    }
    for (int j = 0; j < NX; ++j) {
      float sum = HSum(_mm256_add_ps(acc[0][j], acc[1][j]));
      if constexpr (kHasMin) sum += HSum(min_acc[j]) + min_tail[j];
      out[j] = sum;
    }
  }
};

template <int NX>
struct Q4_0K : DotAvx2<Fmt::kQ4_0, NX> {};
template <int NX>
struct Q4_1K : DotAvx2<Fmt::kQ4_1, NX> {};
template <int NX>
struct Q8_0K : DotAvx2<Fmt::kQ8_0, NX> {};
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
