// Causal fresh-K/V attention: validation and the choice between the tensor-core kernel and the
// exact fp32 one (see the header for math, shapes and tolerances).
#include "kernels/cuda/ops/prefill_attention_cuda.h"
#include "kernels/cuda/ops/prefill_attention_paths.h"

namespace witcert {

CudaStatus PrefillAttentionCuda(const float* q, int64_t q_stride, const float* k, const float* v,
                                int64_t kv_stride, int64_t n, int32_t num_heads,
                                int32_t num_kv_heads, int32_t head_dim, float* out,
                                int64_t out_stride, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (head_dim <= 0 || head_dim % 32 != 0 || head_dim > 256) {
    return CudaStatus::Error("PrefillAttentionCuda: head_dim must be a multiple of 32, <= 256");
  }
  if (num_kv_heads <= 0 || num_heads <= 0 || num_heads % num_kv_heads != 0) {
    return CudaStatus::Error("PrefillAttentionCuda: num_heads must be a multiple of num_kv_heads");
  }
  if (PrefillAttentionMmaSupports(q, q_stride, k, v, kv_stride, n, head_dim, out, out_stride)) {
    return PrefillAttentionMmaCuda(q, q_stride, k, v, kv_stride, n, num_heads, num_kv_heads,
                                   head_dim, out, out_stride, stream);
  }
  return PrefillAttentionFp32Cuda(q, q_stride, k, v, kv_stride, n, num_heads, num_kv_heads,
                                  head_dim, out, out_stride, stream);
}

}  // namespace witcert
