// Pipelined decode kernel instantiations for the unscaled formats.
#include "kernels/cuda/metered_decode_pipelined.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchPipelinedForCodec<DevFp32>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
template CudaStatus LaunchPipelinedForCodec<DevFp16>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
template CudaStatus LaunchPipelinedForCodec<DevBf16>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
template CudaStatus LaunchPipelinedForCodec<DevFp8Raw>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
}  // namespace witcert::cuda_kv
