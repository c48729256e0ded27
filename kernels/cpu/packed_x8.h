// Row-interleaved ("x8") copies of Q4_0 / Q4_1 / Q8_0 weight matrices and their matmul kernel.
//
// Why: the plain kernels dot ONE weight row with up to 4 activation rows, so every block
// costs a horizontal reduction per (row, activation): maddubs, madd, convert and FMA for 32
// multiply-adds. Interleaving 8 weight rows makes the vector lanes the rows: one broadcast
// of 4 activation bytes against 32 bytes of weights is 4 elements × 8 rows, and one convert
// + 2 FMAs finish a block for all 8 rows. Q4: the 8 maddubs of a block sum in int16
// (≤ 8·15·127·2 < 2^15), about 20 vector ops per 256 multiply-adds instead of ~64. Q8_0: the
// signed weights go through |w| · sign(x, w) and each maddubs is widened (no int16 headroom),
// about 34 ops instead of ~48.
//
// Layout: rows are taken in groups of 8 (the last group zero-padded), each group stored as
// its nb = cols / 32 blocks in order:
//   Q4_0 / Q4_1, 160 bytes per block:
//     d[8] fp16, the 8 rows' block scales;  m[8] fp16, Q4_1's mins (Q4_0: zero)
//     qs[4][32]: byte 4r + e of vector v holds row r's element 4v + e in its low nibble and
//                element 4(v + 4) + e in its high nibble.
//   Q8_0, 272 bytes per block:
//     d[8] fp16;  qs[8][32]: byte 4r + e of vector v is row r's element 4v + e (int8).
//
// Arithmetic, per (row, activation row): for each block b in order,
//   acc = fma(d_w·d_x, Σ q_w·q_x, acc);  Q4: acc = fma(m_w, s_x, acc)   (Q4_0: m_w = −8·d_w)
// which is exactly the plain scalar kernels' (DotQ4_0Scalar, DotQ4_1Scalar, DotQ8_0Scalar)
// op sequence: the AVX2 kernel here, its VNNI builds (packed_x8_vnni.cc, one vpdpbusd where
// AVX2 needs maddubs + madd) and those give the same bits, for any number of activation rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/quant_matrix.h"

namespace witcert {

inline constexpr int kPackRows = 8;
// Byte offsets in a packed block: d[8] fp16, (Q4) m[8] fp16, then qs.
inline constexpr size_t kPackedScaleBytes = kPackRows * sizeof(uint16_t);
inline constexpr size_t kPackedQ4QsOffset = 2 * kPackedScaleBytes;
inline constexpr size_t kPackedQ8QsOffset = kPackedScaleBytes;

// 8-row groups holding `rows` rows (the last one zero-padded).
inline int64_t PackedX8Groups(int64_t rows) { return (rows + kPackRows - 1) / kPackRows; }
// True for the formats PackX8 takes (Q4_0, Q4_1, Q8_0) with cols % 32 == 0.
bool PackableX8(const QuantMatrix& w);
// Bytes per packed (group, block): 160 for the 4-bit formats, 272 for Q8_0.
constexpr size_t PackedX8BlockBytes(GgmlType type) {
  return type == GgmlType::kQ8_0 ? kPackedQ8QsOffset + 8 * 32 : kPackedQ4QsOffset + 4 * 32;
}
// Bytes of the packed copy: ceil(rows / 8) groups × cols / 32 blocks × PackedX8BlockBytes.
size_t PackedX8Bytes(GgmlType type, int64_t rows, int64_t cols);
// Writes the packed copy of `w` (PackableX8) into out [PackedX8Bytes].
void PackX8(const QuantMatrix& w, uint8_t* out);

namespace matmul_internal {

// out[8·j + r] = <row r of `group`, x_j> for j < nx (1..kPackedMaxTile), r < 8; x_j is a
// Q8_1Row at x + j·stride; `type` is the packed matrix's format.
using PackedDotFn = void (*)(const uint8_t* group, const uint8_t* x, size_t stride, int nx,
                             int64_t cols, GgmlType type, float* out);
// Activation rows per tile: at 8 a Q4 block's unpacked chunks serve eight rows (the
// accumulators no longer all fit in registers, but by op count the unpack was about a sixth of
// the ALU work at 4; bench_kernels_cpu at n = 16 in RESULTS.md).
inline constexpr int kPackedMaxTile = 8;

void DotPackedX8Scalar(const uint8_t* group, const uint8_t* x, size_t stride, int nx,
                       int64_t cols, GgmlType type, float* out);
// nullptr when the build has no AVX2.
PackedDotFn DotPackedX8Avx2();
// The same kernel on vpdpbusd (packed_x8_vnni.cc): AVX-VNNI's VEX form, AVX512-VNNI's 256-bit
// EVEX form. Bit-identical to the AVX2 one; null where not built. Callers check the CPU
// (CpuKernelAvailable(kAvxVnni / kAvx512Vnni)).
PackedDotFn DotPackedX8AvxVnni();
PackedDotFn DotPackedX8Avx512Vnni();

}  // namespace matmul_internal
}  // namespace witcert
