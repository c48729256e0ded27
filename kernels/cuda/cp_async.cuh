// cp.async (sm_80+): 16- or 8-byte copies from global to shared memory that hold no registers
// while in flight. A thread waits for its own groups (CpAsyncWait) before reading what it copied;
// other threads' copies need a barrier after their wait too.
#pragma once

#include <cstdint>

namespace witcert::cuda_copy {

// To a shared-memory address already in the shared window (__cvta_generic_to_shared), for
// loaders that keep their stage addresses as 32-bit offsets.
__device__ __forceinline__ void CpAsync16Shared(uint32_t smem, const void* gmem, bool valid) {
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  CpAsync16Shared(static_cast<uint32_t>(__cvta_generic_to_shared(smem)), gmem, valid);
}
// 8 bytes, through L1 (cp.async.cg takes only 16): both addresses 8-byte aligned.
__device__ __forceinline__ void CpAsync8(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 8 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

}  // namespace witcert::cuda_copy
