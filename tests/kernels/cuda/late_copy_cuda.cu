#include "tests/kernels/cuda/late_copy_cuda.h"

#include "kernels/cuda/dependent_launch.cuh"

namespace witcert::testing {
namespace {

__global__ void LateCopyKernel(const uint8_t* src, uint8_t* dst, size_t bytes, uint64_t delay_ns) {
  cuda_launch::AllowNextKernelToStart();
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < delay_ns);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < bytes; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = src[i];
  }
}

}  // namespace

CudaStatus LateCopyCuda(const void* src, void* dst, size_t bytes, uint64_t delay_ns, cudaStream_t stream) {
  LateCopyKernel<<<1, 256, 0, stream>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), bytes,
                                        delay_ns);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

}  // namespace witcert::testing
