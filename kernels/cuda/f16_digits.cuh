// fp32 values as two fp16 or bf16 digits, for the pipelined decode kernel's tensor-core paths
// (metered_decode_pipelined.cuh, fp16 and bf16 KV at d = 128; the MMA and ldmatrix primitives are
// ops/mma_f16.cuh's): the softmax weights of the value pass and the query of the logits. With the
// meter on, the logits' η counts the query digits' miss below (tc_logit_eta.cuh). Host-callable,
// so tests/kernels/cuda/f16_digits_test.cc checks the error bounds below on the CPU.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace witcert::cuda_kv {

// The fp16 in the low / high half of a 32-bit word (a digit pair, or any two packed fp16) as fp32,
// exact.
__host__ __device__ __forceinline__ float F16LowHalf(uint32_t x) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(x & 0xffffu)));
}
__host__ __device__ __forceinline__ float F16HighHalf(uint32_t x) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(x >> 16)));
}

// x as two fp16 digits, hi = fp16(x) and lo = fp16(x − hi) (the difference exact in fp32), as
// the low and high halves: hi + lo misses x by ≤ 2^-22 of it, or by ≤ 2^-25 absolute where lo is
// subnormal. |x| must stay below fp16's 65504.
__host__ __device__ __forceinline__ uint32_t F16DigitPair(float x) {
  const __half hi = __float2half_rn(x);
  const __half lo = __float2half_rn(x - __half2float(hi));
  return static_cast<uint32_t>(__half_as_ushort(hi)) | (static_cast<uint32_t>(__half_as_ushort(lo)) << 16);
}

// x as two bf16 digits, hi = bf16(x) and lo = bf16(x − hi) (the difference exact in fp32): hi + lo
// misses x by ≤ 2^-16 of it (8-bit significands; fp32's range, so no scaling is needed) down to
// |x| ≈ 2^-118, below which lo is subnormal and the miss is < 2^-134 absolute.
__host__ __device__ __forceinline__ uint32_t Bf16DigitPair(float x) {
  const __nv_bfloat16 hi = __float2bfloat16_rn(x);
  const __nv_bfloat16 lo = __float2bfloat16_rn(x - __bfloat162float(hi));
  return static_cast<uint32_t>(__bfloat16_as_ushort(hi)) | (static_cast<uint32_t>(__bfloat16_as_ushort(lo)) << 16);
}

// The digit split of each 16-bit format, for kernels templated on it. Weight(w): a softmax weight
// w ∈ [0, 1] as the digit pair of w·kWeightScale, which callers undo on the sums.
//  * fp16: w·2^15, so that weights down to 2^-29 stay in fp16's normal range (hi ≤ 2^15 <
//    65504); hi + lo misses w by ≤ 2^-22 of it, or by ≤ 2^-40 absolute for the smallest weights
//    (the fp32 weights' own rounding is 2^-24 relative).
//  * bf16: no scale (fp32's range); ≤ 2^-16 of w for w ≥ 2^-118.
template <bool BF16>
struct DigitFormat {
  static constexpr float kWeightScale = 32768.0f;
  __host__ __device__ static uint32_t Pair(float x) { return F16DigitPair(x); }
  __host__ __device__ static uint32_t Weight(float w) { return Pair(w * kWeightScale); }
};
template <>
struct DigitFormat<true> {
  static constexpr float kWeightScale = 1.0f;
  __host__ __device__ static uint32_t Pair(float x) { return Bf16DigitPair(x); }
  __host__ __device__ static uint32_t Weight(float w) { return Pair(w); }
};

}  // namespace witcert::cuda_kv
