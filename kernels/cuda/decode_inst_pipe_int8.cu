// Pipelined decode kernel instantiations for the int8 formats (split so compiler processes share the work).
#include "kernels/cuda/metered_decode_pipelined.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchPipelinedForCodec<DevInt8Rtn>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
template CudaStatus LaunchPipelinedForCodec<DevInt8Dither>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
}  // namespace witcert::cuda_kv
