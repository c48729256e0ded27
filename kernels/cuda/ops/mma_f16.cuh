// Warp-level fp16 tensor-core primitives (sm_80+ PTX) for the CUDA ops: the m16n8k16 MMA
// with fp32 accumulation, ldmatrix loads of its operands from shared memory, and the packing
// of fp32 accumulators into fp16 A operands.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4), which the callers rely on:
//   A [16 rows, 16 k] fp16, 4 regs of half2: a0 (row g, k 2t..2t+1), a1 (row g+8, k 2t..),
//     a2 (row g, k 2t+8..), a3 (row g+8, k 2t+8..).
//   B [16 k, 8 cols] fp16, 2 regs: b0 (k 2t..2t+1, col g), b1 (k 2t+8.., col g).
//   C/D [16 rows, 8 cols] fp32, 4 regs: c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, ...).
// So the C fragments of two adjacent 8-column tiles, packed to fp16, are the A fragment of a
// 16-wide k step: no shuffle between a QKᵀ and the PV that consumes it.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

namespace witcert::mma {

// d += a · b, fp16 inputs, fp32 accumulation.
__device__ __forceinline__ void MmaF16F32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a · b for mma.m16n8k8 (fp16 inputs, fp32 accumulation): A [16 rows, 8 k] as a0 (row g,
// k 2t..2t+1) and a1 (row g+8, same k), B [8 k, 8 cols] as b0 (k 2t..2t+1, col g), C as above.
__device__ __forceinline__ void MmaF16F32K8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// The same with bf16 inputs (the fragment layouts are fp16's).
__device__ __forceinline__ void MmaBf16F32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The bf16 or the fp16 form, for kernels templated on the format.
template <bool BF16>
__device__ __forceinline__ void Mma16F32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    MmaBf16F32(d, a, b0, b1);
  } else {
    MmaF16F32(d, a, b0, b1);
  }
}

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 fp16 matrices; lanes 8i..8i+7 give the 16-byte row addresses of matrix i, and
// r[i] receives this lane's (row g, cols 2t..2t+1) of matrix i.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_address));
}

// As LdMatrixX4, transposed: r[i] receives (rows 2t..2t+1, col g) of matrix i.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_address));
}

// Two fp8-e4m3 codes as an fp16 pair, exactly (every e4m3 value, subnormals and NaN included, is an
// fp16 one): the codes in the low (Lo) or high (Hi) 16 bits of w, the lower byte to the low half.
// One cvt.rn.f16x2.e4m3x2 each (sm_89+): how fp8 KV feeds the fp16 MMAs above.
__device__ __forceinline__ uint32_t E4m3PairLoToF16x2(uint32_t w) {
  uint32_t r;
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\t}\n" : "=r"(r) : "r"(w));
  return r;
}
__device__ __forceinline__ uint32_t E4m3PairHiToF16x2(uint32_t w) {
  uint32_t r;
  asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, h;\n\t}\n" : "=r"(r) : "r"(w));
  return r;
}

// Two 2-bit codes as an fp16 pair in one AND: bits [B, B + 2) of each 16-bit half of w, the
// rest cleared. Read as fp16 (B ≤ 8: inside the fraction field, exponent field 0) each half is
// the subnormal m·2^(B−24), m ∈ {0, 1, 2, 3}, exactly. The tensor cores take fp16 subnormals
// without flushing them (kernels_cuda_mma_rounding_model_test's small-input case, within its
// model on the device) and their products are exact, so an MMA over such a fragment is the MMA
// over m times 2^(B−24): a power of two the caller takes off the sums, per row if B differs by
// row. How kivi2's value codes feed the fp16 MMAs above.
template <int B>
__device__ __forceinline__ uint32_t TwoBitPairAsF16Subnormals(uint32_t w) {
  static_assert(B >= 0 && B <= 8, "the code must stay in fp16's fraction field");
  return w & (0x00030003u << B);
}

// 0xffff in the low half where bit 7 of byte j (0..3) of `lo` is set, in the high half where bit 7
// of byte j of `hi` is (PRMT's sign replication; __byte_perm has no such mode). Two 2-bit codes'
// bit planes as masks over an fp16 pair: one PRMT for both halves. j is a constant where unrolled.
__device__ __forceinline__ uint32_t ByteSignHalfMasks(uint32_t lo, uint32_t hi, int j) {
  const uint32_t sel = (8u | j) * 0x11u | ((12u | j) * 0x11u) << 8;
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(lo), "r"(hi), "r"(sel));
  return r;
}

// lo in the low half (the smaller column), as the fragments above expect.
__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 2^x by the SFU (ex2.approx: relative error ~2^-22; 2^-inf = +0).
__device__ __forceinline__ float Exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace witcert::mma
