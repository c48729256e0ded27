// The x8 grouped dot kernel (packed_x8.h), shared by the AVX2 build (packed_x8.cc) and the
// VNNI builds (packed_x8_vnni.cc, each after its own `#pragma GCC target`). Everything here has
// internal linkage, so each ISA gets its own copy and nothing compiled for a newer ISA can leak
// into baseline code.
//
// The builds differ only in `Ops`, which turns bytes into exact int32 lane sums (lane r = row r
// of the group):
//   Ops::Q8Chunk(isum, first, aw, sx): (first ? 0 : isum) + the 4 products aw·sx of each
//     lane's bytes, aw = |w| (u8) and sx = sign(x, w) (i8);
//   Ops::Q4Rows<NX>(lo, hi, xr, b, isum): isum[j] = Σ over block b's 32 elements of q_w·q_x
//     for activation row j, the weights' low nibbles in lo[v] (elements 4v..4v+3) and high
//     ones in hi[v] (elements 16+4v..). A whole tile at once, so a build can interleave the
//     rows' dependency chains.
// maddubs (+ madd) and vpdpbusd give the same exact integers (the operands keep maddubs below
// int16 saturation), and the fp32 tail below is one op sequence for all builds, so every
// build gives the bits of the scalar kernels.
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/packed_x8.h"

#ifdef WITCERT_MATMUL_AVX2
namespace witcert::matmul_internal {
namespace {  // NOLINT(build/namespaces): one private copy per ISA-specific translation unit

// f(integral_constant<int, 0>), ..., f(integral_constant<int, N−1>), always inlined: inside a
// `#pragma GCC target` region GCC otherwise kept some of these calls out of line, and the
// tile's accumulators then went through memory (perf: half the samples of a 16-row step).
// Callers' lambdas are marked always_inline for the same reason.
#define WITCERT_INLINE_LAMBDA __attribute__((always_inline))
template <int N, typename Fn>
__attribute__((always_inline)) inline void Unrolled(Fn&& fn) {
  [&]<int... J>(std::integer_sequence<int, J...>) WITCERT_INLINE_LAMBDA {
    (fn(std::integral_constant<int, J>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i LoadVec(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

enum class Fmt { kQ4_0, kQ4_1, kQ8_0 };

// One group against NX activation rows. Per block, `isum[j]` ends as the 8 rows' exact
// Σ q_w·q_x (int32 lanes); the fp32 tail is the scalar kernels' fma sequence per lane.
template <Fmt F, class Ops, int NX>
void DotGroup(const uint8_t* group, const uint8_t* x, size_t stride, int64_t cols, float* out) {
  constexpr size_t kBlockBytes =
      PackedX8BlockBytes(F == Fmt::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kQ4_1);
  const int64_t nb = cols / kQk;
  Q8_1Row xr[NX];
  __m256 acc[NX];
  Unrolled<NX>([&](auto jc) WITCERT_INLINE_LAMBDA {
    constexpr int j = decltype(jc)::value;
    xr[j] = ViewQ8_1Row(x + j * stride, cols);
    acc[j] = _mm256_setzero_ps();
  });
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + static_cast<size_t>(b) * kBlockBytes;
    __m256i isum[NX];
    if constexpr (F == Fmt::kQ8_0) {
      // Signed × signed: |w| · sign(x, w).
      Unrolled<8>([&](auto vc) WITCERT_INLINE_LAMBDA {
        constexpr int v = decltype(vc)::value;
        const __m256i w = LoadVec(blk + kPackedQ8QsOffset + 32 * v);
        const __m256i aw = _mm256_sign_epi8(w, w);
        Unrolled<NX>([&](auto jc) WITCERT_INLINE_LAMBDA {
          constexpr int j = decltype(jc)::value;
          const __m256i xv = Broadcast4(xr[j].qs + b * kQk + 4 * v);
          isum[j] = Ops::Q8Chunk(isum[j], v == 0, aw, _mm256_sign_epi8(xv, w));
        });
      });
    } else {
      // The block's 8 unpacked chunk vectors stay in registers for every activation row.
      __m256i lo[4], hi[4];
      Unrolled<4>([&](auto vc) WITCERT_INLINE_LAMBDA {
        constexpr int v = decltype(vc)::value;
        const __m256i packed = LoadVec(blk + kPackedQ4QsOffset + 32 * v);
        lo[v] = _mm256_and_si256(packed, nibble);
        hi[v] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
      });
      Ops::template Q4Rows<NX>(lo, hi, xr, b, isum);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    Unrolled<NX>([&](auto jc) WITCERT_INLINE_LAMBDA {
      constexpr int j = decltype(jc)::value;
      acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xr[j].d[b])),
                               _mm256_cvtepi32_ps(isum[j]), acc[j]);
    });
    if constexpr (F != Fmt::kQ8_0) {
      const __m128i* mins = reinterpret_cast<const __m128i*>(blk + kPackedScaleBytes);
      const __m256 mw = F == Fmt::kQ4_0 ? _mm256_mul_ps(dw, _mm256_set1_ps(-8.0f))
                                        : _mm256_cvtph_ps(_mm_loadu_si128(mins));
      Unrolled<NX>([&](auto jc) WITCERT_INLINE_LAMBDA {
        constexpr int j = decltype(jc)::value;
        acc[j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xr[j].s[b]), acc[j]);
      });
    }
  }
  Unrolled<NX>([&](auto jc) WITCERT_INLINE_LAMBDA {
    constexpr int j = decltype(jc)::value;
    _mm256_storeu_ps(out + kPackRows * j, acc[j]);
  });
}

// DotGroup for nx activation rows, 1 ≤ nx ≤ kPackedMaxTile (a table of the tile widths).
template <Fmt F, class Ops, int... W>
constexpr auto DotGroupWidths(std::integer_sequence<int, W...>) {
  return std::array<void (*)(const uint8_t*, const uint8_t*, size_t, int64_t, float*),
                    sizeof...(W)>{&DotGroup<F, Ops, W + 1>...};
}

template <Fmt F, class Ops>
void DotGroupAnyWidth(const uint8_t* group, const uint8_t* x, size_t stride, int nx, int64_t cols,
                      float* out) {
  static constexpr auto kByWidth =
      DotGroupWidths<F, Ops>(std::make_integer_sequence<int, kPackedMaxTile>{});
  kByWidth[std::clamp(nx, 1, kPackedMaxTile) - 1](group, x, stride, cols, out);
}

// A PackedDotFn over `Ops`.
template <class Ops>
void DotPackedX8With(const uint8_t* group, const uint8_t* x, size_t stride, int nx, int64_t cols,
                     GgmlType type, float* out) {
  switch (type) {
    case GgmlType::kQ4_0:
      return DotGroupAnyWidth<Fmt::kQ4_0, Ops>(group, x, stride, nx, cols, out);
    case GgmlType::kQ4_1:
      return DotGroupAnyWidth<Fmt::kQ4_1, Ops>(group, x, stride, nx, cols, out);
    default:
      return DotGroupAnyWidth<Fmt::kQ8_0, Ops>(group, x, stride, nx, cols, out);
  }
}

// The Ops of a VNNI build, whose `Dp::Acc(acc, u, i)` is its one vpdpbusd. A Q4 block goes
// chunk by chunk across the tile: NX independent accumulator chains in flight (one row's 8
// dependent vpdpbusd in a row would wait on the instruction's latency each time).
template <class Dp>
struct DpbusdPackedOps {
  static __m256i Q8Chunk(__m256i isum, bool first, __m256i aw, __m256i sx) {
    return Dp::Acc(first ? _mm256_setzero_si256() : isum, aw, sx);
  }
  template <int NX>
  static void Q4Rows(const __m256i (&lo)[4], const __m256i (&hi)[4], const Q8_1Row (&xr)[NX],
                     int64_t b, __m256i (&isum)[NX]) {
    Unrolled<NX>([&](auto jc) WITCERT_INLINE_LAMBDA {
      isum[decltype(jc)::value] = _mm256_setzero_si256();
    });
    Unrolled<4>([&](auto vc) WITCERT_INLINE_LAMBDA {
      constexpr int v = decltype(vc)::value;
      Unrolled<NX>([&](auto jc) WITCERT_INLINE_LAMBDA {
        constexpr int j = decltype(jc)::value;
        const int8_t* xq = xr[j].qs + b * kQk;
        isum[j] = Dp::Acc(isum[j], lo[v], Broadcast4(xq + 4 * v));
        isum[j] = Dp::Acc(isum[j], hi[v], Broadcast4(xq + 4 * (v + 4)));
      });
    });
  }
};

}  // namespace
}  // namespace witcert::matmul_internal
#endif  // WITCERT_MATMUL_AVX2
