// Hopper's copy engine for contiguous runs (cp.async.bulk): one thread moves kilobytes of global
// memory into shared memory with one instruction, and the copy completes on a shared-memory
// mbarrier that the consuming threads wait on. What a streaming kernel needs to keep a fixed
// number of bytes in flight without spending registers or issue slots on the loads. Only
// bench_gemv_chain (e) uses it (a streaming GEMV tried and not kept: bench/RESULTS.md, 2026-12-03).
//
// A barrier here has one arrival per phase (the thread that issues the copies, ExpectBytes) plus
// the bytes it announced; a phase completes when both are in, and WaitPhase(parity) returns once
// the phase with that parity has completed (phases alternate 0, 1, 0, …).
#pragma once

#include <cstdint>

namespace witcert::cuda_bulk {

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread; then FenceBarrierInit() before any copy is issued on it, and a __syncthreads()
// before other threads wait on it.
__device__ __forceinline__ void InitBarrier(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SmemAddress(bar)) : "memory");
}
__device__ __forceinline__ void FenceBarrierInit() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// An L2 policy for bytes read once (weights streamed through a decode step).
__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// The phase's arrival, announcing the bytes the copies issued after it will deliver.
__device__ __forceinline__ void ExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddress(bar)), "r"(bytes) : "memory");
}

// dst [bytes] (shared) ← src [bytes] (global); both 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void CopyToShared(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                             uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          SmemAddress(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddress(bar)), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void WaitPhase(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(SmemAddress(bar)), "r"(parity)
                 : "memory");
  }
}

}  // namespace witcert::cuda_bulk
