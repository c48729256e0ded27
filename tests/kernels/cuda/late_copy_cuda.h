// A test kernel that stands in for a slow producer before a programmatic dependent launch: it lets
// the next kernel launch at once (AllowNextKernelToStart), then waits `delay_ns` and only then
// copies `bytes` from src to dst. A dependent kernel that reads dst, or anything written after
// this kernel, before its WaitForPreviousKernel() sees the old contents.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"

namespace witcert::testing {

CudaStatus LateCopyCuda(const void* src, void* dst, size_t bytes, uint64_t delay_ns, cudaStream_t stream);

}  // namespace witcert::testing
