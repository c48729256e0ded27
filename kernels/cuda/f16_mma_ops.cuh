// The fp16 tensor-core building blocks of the pipelined decode kernel (metered_decode_pipelined.cuh,
// fp16 KV at d = 128): the m16n8k16 MMA with fp32 accumulators, the 8×8 matrix loads (plain and
// transposing), and the split of an fp32 value into two fp16 digits.
//
// The value pass goes through these always; the logits only when the meter is off. The tensor
// cores' fp32 accumulation order and rounding are not specified exactly enough to bound, so
// nothing a certificate rests on may pass through them (certificates.md §4).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

namespace witcert::cuda_kv {

// D += A·B, m16n8k16, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void MmaF16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8×8 b16 matrices: lane l gives the row address (16 bytes, in the shared window) of row
// l % 8 of matrix l / 8 and receives, of matrix i, register i = {M[l/4][2(l%4)], M[l/4][2(l%4)+1]}.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row));
}

// Four 8×8 b16 matrices, each transposed: lane l gives the row address (16 bytes, in the shared
// window) of row l % 8 of matrix l / 8 and receives, of matrix i, register i = {M[2(l%4)][l/4],
// M[2(l%4)+1][l/4]}.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row));
}

// x as two fp16 digits, hi = fp16(x) and lo = fp16(x − hi) (the difference exact in fp32), as
// the low and high halves: hi + lo misses x by ≤ 2^-22 of it, or by ≤ 2^-25 absolute where lo is
// subnormal. |x| must stay below fp16's 65504.
__device__ __forceinline__ uint32_t F16DigitPair(float x) {
  const __half hi = __float2half_rn(x);
  const __half lo = __float2half_rn(x - __half2float(hi));
  return static_cast<uint32_t>(__half_as_ushort(hi)) | (static_cast<uint32_t>(__half_as_ushort(lo)) << 16);
}

// A softmax weight w ∈ [0, 1] as the digit pair of w·2^15 (kWeightDigitScale): ≤ 2^-40 of w
// absolute off, where the fp32 weights' own rounding is 2^-24 relative. Scaling by 2^15 keeps
// weights down to 2^-29 in fp16's normal range (hi ≤ 2^15 < 65504).
constexpr float kWeightDigitScale = 32768.0f;
__device__ __forceinline__ uint32_t WeightDigitsF16(float w) { return F16DigitPair(w * kWeightDigitScale); }

}  // namespace witcert::cuda_kv
