// Pipelined decode kernel instantiations for fp8-e4m3 (scaled) and int4-rtn.
#include "kernels/cuda/metered_decode_pipelined.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchPipelinedForCodec<DevFp8Scaled>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
template CudaStatus LaunchPipelinedForCodec<DevInt4Rtn>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
}  // namespace witcert::cuda_kv
