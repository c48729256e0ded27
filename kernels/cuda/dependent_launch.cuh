// Programmatic dependent launch (Hopper): a kernel launched this way may start while the kernel
// before it on the stream is still finishing, so its launch and the work that depends on nothing
// earlier (e.g. a GEMV's first weight loads) overlap that kernel's tail. Such a kernel must call
// WaitForPreviousKernel() before it touches anything an earlier kernel wrote, or writes anything
// one reads — in every CTA, so that its completion still implies its predecessor's. Both device
// calls are no-ops when the kernel was launched the ordinary way.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"

namespace witcert::cuda_launch {

__device__ __forceinline__ void WaitForPreviousKernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Lets the next programmatic dependent kernel launch before this one ends (otherwise it may when
// every CTA of this one has exited).
__device__ __forceinline__ void AllowNextKernelToStart() { asm volatile("griddepcontrol.launch_dependents;"); }

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when
// `overlap_previous`.
template <class... Params, class... Args>
CudaStatus Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                  bool overlap_previous, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl;
  cfg.numAttrs = overlap_previous ? 1 : 0;
  WITCERT_CUDA_CALL(cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...));
  return CudaStatus::Ok();
}

}  // namespace witcert::cuda_launch
