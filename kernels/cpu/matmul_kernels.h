// Internal pieces of the CPU matmul: activation quantization and per-format row dots.
//
// Each RowDot kernel dots ONE weight row with `nx` (1..kMaxTile) activation rows, so a
// weight row is loaded and unpacked once per tile (prefill reuses it; decode has nx = 1).
// Batch invariance: the arithmetic for activation row j is the same op sequence whatever
// nx and j are, so a token's logits do not depend on how many rows share its call.
// Every kernel has a scalar version (always compiled, used when AVX2 is off, tested
// directly) and an AVX2 version; the 32-element formats also have AVX-VNNI and AVX512-VNNI
// versions, compiled with per-function target attributes and chosen once at run time
// (SelectedCpuKernel), giving bit-identical results to the AVX2 version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/quant_blocks.h"

namespace witcert::matmul_internal {

inline constexpr int kMaxTile = 4;      // widest tile of the 256-bit kernels
inline constexpr int kMaxWideTile = 8;  // widest tile of the AVX-512 kernels

// Calls K<nx>::Run(w_row, x, stride, cols, out) for 1 ≤ nx ≤ kMax (wider → K<kMax>): one
// instantiation per tile width, chosen by a fold over the widths.
template <template <int> class K, int... I>
inline void DispatchTileImpl(std::integer_sequence<int, I...>, const uint8_t* w_row,
                             const uint8_t* x, size_t stride, int nx, int64_t cols, float* out) {
  constexpr int kMax = static_cast<int>(sizeof...(I));
  const int width = nx < 1 ? 1 : (nx > kMax ? kMax : nx);
  ((width == I + 1 ? (K<I + 1>::Run(w_row, x, stride, cols, out), 0) : 0), ...);
}

template <int kMax, template <int> class K>
void DispatchTileUpTo(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx,
                      int64_t cols, float* out) {
  DispatchTileImpl<K>(std::make_integer_sequence<int, kMax>{}, w_row, x, stride, nx, cols, out);
}

// The 256-bit kernels' dispatch (widths 1..kMaxTile).
template <template <int> class K>
void DispatchTile(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                  float* out) {
  DispatchTileUpTo<kMaxTile, K>(w_row, x, stride, nx, cols, out);
}

// One activation row for the 32-element formats, stored struct-of-arrays so the kernels
// load 8 block scales as one vector: d[nb], s[nb], then qs[nb][32] (nb = cols / 32).
// x ≈ d[b]·qs[b][i]; s[b] = d[b]·Σ_i qs[b][i] carries Q4_1's min term (and Q4_0's -8
// offset) without touching the int8 values.
struct Q8_1Row {
  const float* d;    // [nb]
  const float* s;    // [nb]
  const int8_t* qs;  // [nb, 32]
};
constexpr size_t Q8_1RowBytes(int64_t cols) {
  return static_cast<size_t>(cols / kQk) * (2 * sizeof(float) + kQk);
}
inline Q8_1Row ViewQ8_1Row(const uint8_t* row, int64_t cols) {
  const int64_t nb = cols / kQk;
  const float* d = reinterpret_cast<const float*>(row);
  return {d, d + nb, reinterpret_cast<const int8_t*>(d + 2 * nb)};
}
// Activation super-block for the K-quants: x ≈ d * qs; bsums[g] = Σ qs[16g .. 16g+15].
struct BlockQ8_Kx {
  float d;
  int16_t bsums[kQkK / 16];
  int8_t qs[kQkK];
};

// x [cols] → one Q8_1Row (resp. [cols / 256] super-blocks); symmetric: d = max|x| / 127, so every
// element's error is at most d / 2.
void QuantizeRowQ8_1(const float* x, int64_t cols, uint8_t* out);  // out [Q8_1RowBytes]
void QuantizeRowQ8_K(const float* x, int64_t cols, BlockQ8_Kx* out);

// out[j] = <w_row, x_j> for j < nx, where x_j starts at x + j * x_stride bytes and is
// a Q8_1Row (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL), BlockQ8_Kx[] (Q2_K … Q6_K, IQ4_XS) or float[]
// (F32, F16, BF16).
using RowDotFn = void (*)(const uint8_t* w_row, const uint8_t* x, size_t x_stride, int nx,
                          int64_t cols, float* out);

void DotQ4_0(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ4_1(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ8_0(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ5_0(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotIQ4_NL(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotIQ4_XS(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ5_1(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ2_K(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ3_K(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ4_K(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ5_K(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ6_K(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotF32(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotF16(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotBF16(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);

// Scalar versions of the same kernels (nx = 1 is enough for them; they loop over j).
void DotQ4_0Scalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ4_1Scalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ8_0Scalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ5_0Scalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotIQ4_NLScalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotIQ4_XSScalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ5_1Scalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ2_KScalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ3_KScalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ4_KScalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ5_KScalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ6_KScalar(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);

// AVX-VNNI (256-bit) and AVX512-VNNI versions of the 32-element format dots. Call only when
// CpuKernelAvailable says so. The AVX-512 ones take nx up to kMaxWideTile.
void DotQ4_0Vnni(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ4_1Vnni(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ8_0Vnni(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ4_0Avx512(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ4_1Avx512(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);
void DotQ8_0Avx512(const uint8_t*, const uint8_t*, size_t, int, int64_t, float*);

// Instruction-set variants of the row dots, slowest first.
enum class CpuKernel { kScalar, kAvx2, kAvxVnni, kAvx512Vnni };
inline constexpr CpuKernel kAllCpuKernels[] = {CpuKernel::kScalar, CpuKernel::kAvx2,
                                               CpuKernel::kAvxVnni, CpuKernel::kAvx512Vnni};

// "scalar", "avx2", "avxvnni", "avx512vnni": the names WITCERT_CPU_KERNEL accepts.
const char* CpuKernelName(CpuKernel k);
// Compiled into this binary and supported by this CPU (and OS).
bool CpuKernelAvailable(CpuKernel k);
// The variant Matmul uses: the test override if set, else WITCERT_CPU_KERNEL (read once;
// a name that is unknown or unavailable here falls back to the best available variant
// below it), else the best available one.
CpuKernel SelectedCpuKernel();
// Test hook: forces `k` (clamped to an available variant like the env var) until cleared.
void SetCpuKernelOverride(CpuKernel k);
void ClearCpuKernelOverride();

// The row dot for `type` in variant `k` and the widest nx it accepts; dot == nullptr for
// formats Matmul does not support. Variants without a dedicated kernel for a format use
// the next slower one (e.g. K-quants run AVX2 under kAvx512Vnni; float formats have no
// scalar variant when the build has AVX2).
struct RowDot {
  RowDotFn dot = nullptr;
  int max_tile = kMaxTile;
};
RowDot RowDotFor(GgmlType type, CpuKernel k);

}  // namespace witcert::matmul_internal
