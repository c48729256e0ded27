// Decode kernel instantiations for kivi2: the first kernel (exact reads always on: its unfilled
// blocks are read from the exact table) and the pipelined one (the same exact reads, KeyParamSlot).
#include "kernels/cuda/metered_decode_kernel.cuh"
#include "kernels/cuda/metered_decode_pipelined.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchDecodeForCodec<DevKivi2>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
template CudaStatus LaunchPipelinedForCodec<DevKivi2>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
}  // namespace witcert::cuda_kv
