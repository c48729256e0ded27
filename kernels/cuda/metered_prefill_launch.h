// The chunked-prefill kernels behind MeteredPrefillCuda (metered_prefill_cuda.h), one per key
// arithmetic, each in its own file: int8-rtn's and int8-dither's exact integer digits
// (metered_prefill_int8.cu), int4-rtn's per group (metered_prefill_int4.cu)
// the 16-bit-float keys' two-digit tensor-core dots (metered_prefill_float.cu: fp16, bf16,
// fp8-e4m3 raw and scaled) and kivi2's bit planes (metered_prefill_kivi2.cu). MeteredPrefillCuda (metered_prefill_cuda.cu) checks the arguments
// once and picks the launcher by scheme; a launcher assumes they were checked.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/metered_prefill_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"

namespace witcert::prefill {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kVecs = 16 * kWarps;  // query vectors per CTA: (row, head) pairs of one KV head
constexpr int kTile = 32;           // tokens per KV tile
constexpr int kD = 128, kBands = 8, kRing = 3;

struct Params {
  PagedKvLayout layout;
  PagedKvLayer kv;
  MeteredPrefillCudaArgs a;
  int32_t group;     // G = Hq / Hkv
  int32_t bs_shift;  // log2(block_size)
};

CudaStatus LaunchInt8(const Params& p, dim3 grid, cudaStream_t stream);
CudaStatus LaunchFloat(const Params& p, dim3 grid, cudaStream_t stream);
CudaStatus LaunchKivi2(const Params& p, dim3 grid, cudaStream_t stream);
CudaStatus LaunchInt4(const Params& p, dim3 grid, cudaStream_t stream);

}  // namespace witcert::prefill
