// Decode kernel instantiations for the scaled formats (fp8-e4m3, int8-rtn, int8-dither,
// int4-rtn).
#include "kernels/cuda/metered_decode_kernel.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchDecodeForCodec<DevFp8Scaled>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
template CudaStatus LaunchDecodeForCodec<DevInt8Rtn>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
template CudaStatus LaunchDecodeForCodec<DevInt8Dither>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
template CudaStatus LaunchDecodeForCodec<DevInt4Rtn>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
}  // namespace witcert::cuda_kv
