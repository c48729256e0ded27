// Tensor-core int8-dither decode kernel in Tier B's scale-only form (meter on), in its own
// translation unit so it compiles beside the other instantiations.
#include "kernels/cuda/metered_decode_int8_mma.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchInt8Mma<true, true, meter::TierBForm::kScaleOnly>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);
}  // namespace witcert::cuda_kv
