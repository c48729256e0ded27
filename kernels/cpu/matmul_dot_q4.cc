// Row dots for the 32-element formats (Q4_0, Q4_1, Q8_0) against Q8_1Row activations.
//
// Q4_1: <w, x> = Σ_b d_w·d_x·Σ q_w·q_x + m_w·s_x, with s_x = d_x·Σ q_x precomputed per block.
// Q4_0 is the same with m_w = -8·d_w (x = d·(q-8)), so both share one kernel and the 4-bit
// values stay unsigned for _mm256_maddubs_epi16 (15·127·2 < 2^15: no saturation).
// Q8_0 is signed × signed: |w| · sign(x, w) makes it unsigned × signed (127·127·2 < 2^15).
//
// Speed: the decode GEMV is bound by instructions per block, not by the integer dot itself.
// Converting each block's fp16 scale (and min) one at a time cost ~8 of ~24 uops per block,
// so the SIMD kernels convert 8 blocks' scales at once, multiply them by the 8 activation
// scales in one vector op, and fold the min term in as one vector FMA per 8 blocks (the
// last nb % 8 blocks take the one-at-a-time path). Two accumulator chains (even / odd
// blocks) hide the FMA latency. This took the hot [576->1536] GEMV from ~60 to ~50 µs.
// The AVX2 kernel body lives in matmul_dot_q4_tile256.h (shared with AVX-VNNI); the
// AVX-512 one in matmul_dot_q4_avx512.cc. All give the same bits (see those files).
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_dot_q4_tile256.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

inline float ScalarMinTerm(const BlockQ4_0& b) { return -8.0f * F16ToF32(b.d); }
inline float ScalarMinTerm(const BlockQ4_1& b) { return F16ToF32(b.m); }

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
      sum = std::fma(ScalarMinTerm(w[b]), xr.s[b], sum);
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
// maddubs (pairs of u8·i8 → i16) then madd with ones (pairs of i16 → i32).
struct Avx2IntDot {
  static __m256i Lanes(__m256i u, __m256i i) { return DotU8I8(u, i); }
};
template <int NX>
struct Q4_0K : DotTile256<Fmt::kQ4_0, Avx2IntDot, NX> {};
template <int NX>
struct Q4_1K : DotTile256<Fmt::kQ4_1, Avx2IntDot, NX> {};
template <int NX>
struct Q8_0K : DotTile256<Fmt::kQ8_0, Avx2IntDot, NX> {};
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
