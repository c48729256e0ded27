// Decode kernel instantiations for kivi2 (first kernel, exact reads always on: its unfilled
// blocks are read from the exact table).
#include "kernels/cuda/metered_decode_kernel.cuh"

namespace witcert::cuda_kv {
template CudaStatus LaunchDecodeForCodec<DevKivi2>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
}  // namespace witcert::cuda_kv
