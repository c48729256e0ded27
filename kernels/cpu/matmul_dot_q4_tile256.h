// The 256-bit row-dot kernel for the 32-element formats, shared by the AVX2 and AVX-VNNI
// builds. Included only by matmul_dot_q4.cc (plain AVX2) and matmul_dot_q4_vnni.cc (after
// `#pragma GCC target("avxvnni")`), so everything here has internal linkage: each ISA gets
// its own copy and no inline function compiled for a newer ISA can leak into baseline code.
//
// The two builds differ only in IntDot::Lanes, which turns 32 u8 × 32 i8 bytes into 8 int32
// lanes, lane l = Σ of the 4 products of bytes 4l..4l+3. maddubs+madd and dpbusd compute
// that same exact integer (the operands keep maddubs below saturation), and everything
// after it is the same fp32 op sequence, so both builds give bit-identical results.
//
// Math: see matmul_dot_q4.cc. Speed: the 8 blocks' fp16 scales (and mins) are converted at
// once, multiplied by the 8 activation scales in one vector op, and the min term folded in
// as one FMA per 8 blocks; even / odd blocks feed two accumulator chains.
#pragma once

#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

#ifdef WITCERT_MATMUL_AVX2
namespace witcert::matmul_internal {
namespace {  // NOLINT(build/namespaces): one private copy per ISA-specific translation unit

enum class Fmt { kQ4_0, kQ4_1, kQ8_0 };

// f(integral_constant<int, 0>), ..., f(integral_constant<int, N−1>): loops over the tile's
// rows expanded at compile time, so every accumulator index is a constant when GCC decides
// what lives in registers (with plain loops it kept them in registers but also stored each
// one to the stack after every FMA).
template <int N, typename Fn>
inline void ForRows(Fn&& fn) {
  [&]<int... J>(std::integer_sequence<int, J...>) {
    (fn(std::integral_constant<int, J>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

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

inline float MinTerm(const BlockQ4_0& b) { return -8.0f * F16ToF32(b.d); }
inline float MinTerm(const BlockQ4_1& b) { return F16ToF32(b.m); }

// The first 4 bytes of 8 consecutive blocks: fp16 d in the low half of each lane (and, for
// Q4_1, fp16 m in the high half). Copied through a small array: on the dev machine this ran
// ~2x faster than _mm256_setr_epi32 of the same loads and ~8% faster than a gather.
template <typename Block>
inline __m256i LoadHeads(const Block* w) {
  int32_t h[8];
  for (int k = 0; k < 8; ++k) std::memcpy(&h[k], &w[k], 4);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
}

// [d0..d7] as fp32 and the matching min terms [m0..m7] (Q4_1: m; Q4_0: -8·d).
template <Fmt F>
inline void HeadScales(const typename Traits<F>::Block* w, __m256* dw, __m256* mw) {
  const __m256i heads = LoadHeads(w);
  const __m256i lo = _mm256_and_si256(heads, _mm256_set1_epi32(0xFFFF));
  // [d0..d3 m0..m3 | d4..d7 m4..m7] → [d0..d7 | m0..m7]
  const __m256i dm =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, _mm256_srli_epi32(heads, 16)), 0xD8);
  *dw = _mm256_cvtph_ps(_mm256_castsi256_si128(dm));
  *mw = F == Fmt::kQ4_1 ? _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1))
                        : _mm256_mul_ps(*dw, _mm256_set1_ps(-8.0f));
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

// Σ w·x of one block as 8 float lanes (exact integer sums converted to fp32). Q8_0 is
// signed × signed: |w| · sign(x, w) makes it unsigned × signed (128·127·2 < 2^15).
template <Fmt F, typename IntDot>
inline __m256 BlockDot(__m256i wq, const int8_t* xq) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  if constexpr (F == Fmt::kQ8_0) {
    return _mm256_cvtepi32_ps(IntDot::Lanes(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq)));
  } else {
    return _mm256_cvtepi32_ps(IntDot::Lanes(wq, xv));
  }
}

template <Fmt F, typename IntDot, int NX>
struct DotTile256 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    using Block = typename Traits<F>::Block;
    constexpr bool kHasMin = F != Fmt::kQ8_0;
    const Block* w = reinterpret_cast<const Block*>(w_row);  // [nb]
    const int64_t nb = cols / kQk;
    Q8_1Row xr[NX];
    __m256 acc[2][NX];
    __m256 min_acc[NX];  // Σ m_w·s_x over full groups of 8 blocks
    float min_tail[NX];  // and over the last nb % 8 blocks
    ForRows<NX>([&](auto jc) {
      constexpr int j = decltype(jc)::value;
      xr[j] = ViewQ8_1Row(x + j * stride, cols);
      acc[0][j] = acc[1][j] = min_acc[j] = _mm256_setzero_ps();
      min_tail[j] = 0.0f;
    });
    alignas(32) float scale[NX][8];  // d_w·d_x for the current group of blocks
    int64_t g = 0;
    for (; g + 8 <= nb; g += 8) {
      __m256 dw, mw;
      HeadScales<F>(w + g, &dw, &mw);
      ForRows<NX>([&](auto jc) {
        constexpr int j = decltype(jc)::value;
        _mm256_store_ps(scale[j], _mm256_mul_ps(dw, _mm256_loadu_ps(xr[j].d + g)));
      });
      if constexpr (kHasMin) {
        ForRows<NX>([&](auto jc) {
          constexpr int j = decltype(jc)::value;
          min_acc[j] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xr[j].s + g), min_acc[j]);
        });
      }
      // Even blocks feed acc[0], odd ones acc[1] (each chain's operations in the same order).
      for (int k = 0; k < 8; k += 2) {
        const __m256i wq0 = WeightBlock<F>(w[g + k]);
        const __m256i wq1 = WeightBlock<F>(w[g + k + 1]);
        ForRows<NX>([&](auto jc) {
          constexpr int j = decltype(jc)::value;
          const __m256 p0 = BlockDot<F, IntDot>(wq0, xr[j].qs + (g + k) * kQk);
          acc[0][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[j][k]), p0, acc[0][j]);
          const __m256 p1 = BlockDot<F, IntDot>(wq1, xr[j].qs + (g + k + 1) * kQk);
          acc[1][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[j][k + 1]), p1, acc[1][j]);
        });
      }
    }
    for (int64_t b = g; b < nb; ++b) {  // the last nb % 8 blocks, one scale at a time
      const float dw = F16ToF32(w[b].d);
      const __m256i wq = WeightBlock<F>(w[b]);
      ForRows<NX>([&](auto jc) {
        constexpr int j = decltype(jc)::value;
        const __m256 p = BlockDot<F, IntDot>(wq, xr[j].qs + b * kQk);
        acc[0][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[j].d[b]), p, acc[0][j]);
        if constexpr (kHasMin) min_tail[j] = std::fma(MinTerm(w[b]), xr[j].s[b], min_tail[j]);
      });
    }
    ForRows<NX>([&](auto jc) {
      constexpr int j = decltype(jc)::value;
      float sum = HSum(_mm256_add_ps(acc[0][j], acc[1][j]));
      if constexpr (kHasMin) sum += HSum(min_acc[j]) + min_tail[j];
      out[j] = sum;
    });
  }
};

}  // namespace
}  // namespace witcert::matmul_internal
#endif  // WITCERT_MATMUL_AVX2
