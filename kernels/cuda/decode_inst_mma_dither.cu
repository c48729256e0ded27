// Tensor-core int8-dither decode kernel instantiations (meter on and off).
#include "kernels/cuda/metered_decode_int8_mma.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchInt8Mma<true, true, meter::TierBForm::kPerToken>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);
template CudaStatus LaunchInt8Mma<false, true, meter::TierBForm::kPerToken>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);
}  // namespace witcert::cuda_kv
