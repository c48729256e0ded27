// Decode kernel instantiations for the unscaled formats (split from the scaled ones so two
// compiler processes share the work).
#include "kernels/cuda/metered_decode_kernel.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchDecodeForCodec<DevFp32>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
template CudaStatus LaunchDecodeForCodec<DevFp16>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
template CudaStatus LaunchDecodeForCodec<DevBf16>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
template CudaStatus LaunchDecodeForCodec<DevFp8Raw>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
}  // namespace witcert::cuda_kv
