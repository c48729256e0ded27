// Row dots for the float weight formats (F32, F16, BF16) against fp32 activations.
//
// No activation quantization: the weight is widened to fp32 on the fly and accumulated with
// FMA in two 8-lane accumulators per activation row (enough to cover FMA latency while
// the tile's NX rows add more independent chains). Any cols is accepted (block size 1).
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

struct F32Load {
  static float One(const uint8_t* p, int64_t i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
#ifdef WITCERT_MATMUL_AVX2
  static __m256 Eight(const uint8_t* p, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i);
  }
#endif
};
struct F16Load {
  static float One(const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return F16ToF32(h);
  }
#ifdef WITCERT_MATMUL_AVX2
  static __m256 Eight(const uint8_t* p, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
  }
#endif
};
struct BF16Load {
  static float One(const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return Bf16ToF32(h);
  }
#ifdef WITCERT_MATMUL_AVX2
  static __m256 Eight(const uint8_t* p, int64_t i) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
#endif
};

template <typename L>
void DotFloat(const uint8_t* w, const uint8_t* x, size_t stride, int nx, int64_t cols, float* out) {
#ifdef WITCERT_MATMUL_AVX2
  const float* xr[kMaxTile];  // nx × [cols]
  __m256 acc0[kMaxTile], acc1[kMaxTile];
  for (int j = 0; j < nx; ++j) {
    xr[j] = reinterpret_cast<const float*>(x + j * stride);
    acc0[j] = _mm256_setzero_ps();
    acc1[j] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    const __m256 w0 = L::Eight(w, i);
    const __m256 w1 = L::Eight(w, i + 8);
    for (int j = 0; j < nx; ++j) {
      acc0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr[j] + i), acc0[j]);
      acc1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr[j] + i + 8), acc1[j]);
    }
  }
  if (i + 8 <= cols) {
    const __m256 w0 = L::Eight(w, i);
    for (int j = 0; j < nx; ++j) acc0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr[j] + i), acc0[j]);
    i += 8;
  }
  for (int j = 0; j < nx; ++j) {
    float sum = HSum(_mm256_add_ps(acc0[j], acc1[j]));
    for (int64_t t = i; t < cols; ++t) sum = std::fma(L::One(w, t), xr[j][t], sum);
    out[j] = sum;
  }
#else
  for (int j = 0; j < nx; ++j) {
    const float* xr = reinterpret_cast<const float*>(x + j * stride);  // [cols]
    float sum = 0.0f;
    for (int64_t t = 0; t < cols; ++t) sum = std::fma(L::One(w, t), xr[t], sum);
    out[j] = sum;
  }
#endif
}

}  // namespace

void DotF32(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotFloat<F32Load>(w, x, s, nx, c, o);
}
void DotF16(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotFloat<F16Load>(w, x, s, nx, c, o);
}
void DotBF16(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotFloat<BF16Load>(w, x, s, nx, c, o);
}

}  // namespace witcert::matmul_internal
