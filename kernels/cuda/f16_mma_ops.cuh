// The fp16 tensor-core building blocks of the pipelined decode kernel's value pass
// (metered_decode_pipelined.cuh, fp16 KV at d = 128): the m16n8k16 MMA with fp32 accumulators,
// the transposing 8×8 matrix load, and the split of a softmax weight into two fp16 digits.
//
// Only the output o = Σ_t w_t·ṽ_t goes through these, never a logit or a certificate term: the
// tensor cores' fp32 accumulation order and rounding are not specified exactly enough to bound,
// so nothing the certificate rests on may pass through them (certificates.md §4).
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

// Four 8×8 b16 matrices, each transposed: lane l gives the row address (16 bytes, in the shared
// window) of row l % 8 of matrix l / 8 and receives, of matrix i, register i = {M[2(l%4)][l/4],
// M[2(l%4)+1][l/4]}.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row));
}

// A softmax weight w ∈ [0, 1] as two fp16 digits of w·2^15 (kWeightDigitScale): hi = fp16(w·2^15)
// and lo = fp16(w·2^15 − hi), the difference exact in fp32. hi + lo misses w·2^15 by ≤ 2^-22 of
// it, or by ≤ 2^-25 absolute where lo is subnormal: ≤ 2^-40 of w absolute, where the fp32
// weights' own rounding is 2^-24 relative. Scaling by 2^15 keeps weights down to 2^-29 in
// fp16's normal range (hi ≤ 2^15 < 65504). Returns {hi, lo} as the low and high halves.
constexpr float kWeightDigitScale = 32768.0f;
__device__ __forceinline__ uint32_t WeightDigitsF16(float w) {
  const float x = w * kWeightDigitScale;
  const __half hi = __float2half_rn(x);
  const __half lo = __float2half_rn(x - __half2float(hi));
  return static_cast<uint32_t>(__half_as_ushort(hi)) | (static_cast<uint32_t>(__half_as_ushort(lo)) << 16);
}

}  // namespace witcert::cuda_kv
