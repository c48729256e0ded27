// CudaBackend's projections: the GEMMs of a layer and the head, with the row ops that ride along
// them. Batch 1 runs every projection on the GEMV (gemv_bf16_cuda.h), which stages its own input
// and, for QKV and gate|up, finishes the next op in its epilogue; larger batches run the
// standalone row kernels and cuBLAS.
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/common/status.h"
#include "kernels/cuda/ops/gemv_bf16_cuda.h"
#include "kernels/cuda/ops/transformer_ops_cuda.h"

namespace witcert {
namespace {

// Batch 1: every projection through the GEMV (2 rows per warp), launched to overlap the kernel
// before it (gemv_bf16_cuda.h). On the H200, bench_decode_gpu llama-3.1-8b 8192 20 1 (graphs
// on, int8-rtn, meter off), alternated twice in one call: the attention projections and head
// only on the GEMV 5.07 / 5.08 ms, every projection 4.94 / 4.94, with the overlap 4.91 / 4.88
// (bench/RESULTS.md, 2026-12-01 21:45 UTC). Larger batches keep cuBLAS.
bool UseGemv(int64_t n) { return n == 1; }
constexpr GemvLaunch kBatchOneGemv{/*rows_per_warp=*/2, /*overlap_previous=*/true};
// The two batch-1 GEMVs behind latency-bound kernels, O behind the split merge and the k|v rows
// behind down's tail, put their whole rows in flight before they wait (GemvLaunch::prefetch_rows,
// where the rows fit shared memory). The 8B step at 8k on the H200, alternated twice in one
// call: int8-rtn off 4.29–4.30 → 4.27–4.28 ms, observe 4.40–4.41 → 4.33, int8-dither observe
// 4.45–4.46 → 4.38. The q rows too (they overlap the KV write) were slower than these two alone
// (bench/RESULTS.md, 2026-12-04 eleventh session).
constexpr bool kPrefetchOutputRows = true, kPrefetchKeyValueRows = true;

}  // namespace

absl::Status CudaBackend::GemmFromF32(const float* x, const float* norm_weight, int64_t n,
                                      int64_t cols, uint16_t* staged, const uint16_t* w,
                                      int64_t rows, float* y, int64_t ldy, float beta, bool prefetch_rows) {
  if (UseGemv(n) && GemvBf16FromF32Supports(cols, x, w, norm_weight)) {
    GemvLaunch launch = kBatchOneGemv;
    launch.prefetch_rows = prefetch_rows;
    WITCERT_KERNEL_OK(GemvBf16FromF32Cuda(x, norm_weight, config_.rms_norm_eps, cols, w, rows, y,
                                          beta, stream_, launch));
    return absl::OkStatus();
  }
  if (norm_weight != nullptr) {
    WITCERT_KERNEL_OK(RmsNormCuda(x, norm_weight, n, cols, config_.rms_norm_eps, nullptr, staged,
                                  stream_));
  } else {
    WITCERT_KERNEL_OK(FloatToBf16Cuda(x, n * cols, staged, stream_));
  }
  return Gemm(staged, n, cols, w, rows, y, ldy, beta);
}

KvWriteArgs CudaBackend::TokenWrite(const float* k_rows, const float* v_rows, const int64_t* d_slots,
                                    const int64_t* d_pos, int64_t n, int32_t layer) const {
  KvWriteArgs write;
  write.k = k_rows;
  write.v = v_rows;
  write.slots = d_slots;
  write.positions = d_pos;
  write.num_tokens = n;
  write.layer = layer;
  write.dither_seed = dither_seed_;
  write.outliers = LayerOutliers(layer);
  return write;
}

absl::StatusOr<bool> CudaBackend::ProjectQkv(const DeviceLayerWeights& lw, const float* x, int64_t n,
                                             const KvWriteArgs& write, float* k_rows, float* v_rows) {
  const int64_t hidden = config_.hidden_dim, qkv_dim = config_.q_dim() + 2 * config_.kv_dim();
  const bool interleaved = config_.rope_pairing == RopePairing::kInterleaved;
  const int64_t* d_pos = write.positions;
  // Qwen3's q/k norm sits between the projection and the rotation, which the GEMV's epilogue
  // fuses (two rows per warp, not a whole head): such models take the GEMM path at batch 1 too.
  if (UseGemv(n) && !config_.qk_norm && GemvBf16FromF32Supports(hidden, x, lw.wqkv.get(), lw.attn_norm.get())) {
    WITCERT_KERNEL_OK(GemvBf16RopeSplitCuda(x, lw.attn_norm.get(), config_.rms_norm_eps, hidden,
                                            lw.wqkv.get(), RopeSplitTargets(lw, d_pos, k_rows, v_rows),
                                            stream_, kBatchOneGemv.overlap_previous,
                                            RopeSplitRows::kKeysValues, kPrefetchKeyValueRows));
    return true;
  }
  RETURN_IF_ERROR(GemmFromF32(x, lw.attn_norm.get(), n, hidden, xn_.get(), lw.wqkv.get(), qkv_dim,
                              qkv_.get(), qkv_dim, 0.0f));
  if (config_.qkv_bias) {
    WITCERT_KERNEL_OK(AddBiasRowsCuda(qkv_.get(), n, qkv_dim, qkv_dim, lw.bqkv.get(), stream_));
  }
  if (config_.qk_norm) {
    WITCERT_KERNEL_OK(QkNormCuda(qkv_.get(), n, qkv_dim, config_.num_heads, config_.num_kv_heads,
                                 config_.head_dim, lw.q_norm.get(), lw.k_norm.get(), config_.rms_norm_eps,
                                 stream_));
  }
  KvWritePlan plan;
  WITCERT_KERNEL_OK(PlanKvWriteCuda(layout_, pool_.layer(write.layer), write, &plan));
  WITCERT_KERNEL_OK(RopeSplitWriteKvCuda(qkv_.get(), qkv_dim, config_.num_heads, RopeFrequencies(),
                                         interleaved, q_.get(), k_rows, v_rows, plan, stream_));
  return false;
}

// The q rows of the batch-1 GEMV (ProjectQkv), launched right behind the KV write: it streams its
// weights and computes q while the write runs, and stores after it (RopeSplitRows::kQueries). Its
// k and v pointers are ProjectQkv's, unwritten here.
absl::Status CudaBackend::ProjectQueries(const DeviceLayerWeights& lw, const float* x,
                                         const int64_t* d_pos) {
  WITCERT_KERNEL_OK(GemvBf16RopeSplitCuda(x, lw.attn_norm.get(), config_.rms_norm_eps,
                                          config_.hidden_dim, lw.wqkv.get(),
                                          RopeSplitTargets(lw, d_pos, k_.get(), v_.get()), stream_,
                                          /*overlap_previous=*/true, RopeSplitRows::kQueries));
  return absl::OkStatus();
}

cuda_ops::RopeFreq CudaBackend::RopeFrequencies() const {
  return cuda_ops::RopeFreq(config_.rope_theta, config_.rope_freq_factors.empty() ? nullptr : rope_factors_.get(),
                            config_.rope_attn_factor);
}

GemvRopeSplitOut CudaBackend::RopeSplitTargets(const DeviceLayerWeights& lw, const int64_t* d_pos,
                                               float* k_rows, float* v_rows) const {
  GemvRopeSplitOut out;
  out.num_heads = config_.num_heads;
  out.num_kv_heads = config_.num_kv_heads;
  out.head_dim = config_.head_dim;
  out.bias = config_.qkv_bias ? lw.bqkv.get() : nullptr;
  out.position = d_pos;
  out.freq = RopeFrequencies();
  out.interleaved = config_.rope_pairing == RopePairing::kInterleaved;
  out.q = q_.get();
  out.k = k_rows;
  out.v = v_rows;
  return out;
}

absl::Status CudaBackend::ProjectGateUp(const DeviceLayerWeights& lw, const float* x, int64_t n) {
  const int64_t hidden = config_.hidden_dim, ffn = config_.ffn_dim;
  if (UseGemv(n) && GemvBf16FromF32Supports(hidden, x, lw.w_gate_up.get(), lw.ffn_norm.get())) {
    WITCERT_KERNEL_OK(GemvBf16SwiGluCuda(x, lw.ffn_norm.get(), config_.rms_norm_eps, hidden,
                                         lw.w_gate_up.get(), ffn, act_.get(), stream_,
                                         kBatchOneGemv.overlap_previous));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(GemmFromF32(x, lw.ffn_norm.get(), n, hidden, xn_.get(), lw.w_gate_up.get(),
                              2 * ffn, gate_up_.get(), 2 * ffn, 0.0f));
  WITCERT_KERNEL_OK(SwiGluCuda(gate_up_.get(), gate_up_.get() + ffn, n, ffn, 2 * ffn, nullptr,
                               act_.get(), stream_));
  return absl::OkStatus();
}

bool CudaBackend::MergeStagesAttention(int64_t n, bool decode_only, bool repair_step) const {
  return !UseGemv(n) && decode_only && !repair_step;
}

absl::Status CudaBackend::ProjectAttentionOutput(const DeviceLayerWeights& lw, int64_t n, bool staged) {
  const int64_t q_dim = config_.q_dim(), hidden = config_.hidden_dim;
  if (staged) return Gemm(attn_bf_.get(), n, q_dim, lw.wo.get(), hidden, x_.get(), hidden, 1.0f);
  return GemmFromF32(attn_.get(), nullptr, n, q_dim, attn_bf_.get(), lw.wo.get(), hidden, x_.get(),
                     hidden, 1.0f, kPrefetchOutputRows);
}

absl::Status CudaBackend::Gemm(const uint16_t* x, int64_t n, int64_t cols, const uint16_t* w,
                               int64_t rows, float* y, int64_t ldy, float beta) {
  if (UseGemv(n) && GemvBf16Supports(cols, x, w)) {
    WITCERT_KERNEL_OK(GemvBf16Cuda(x, cols, w, rows, y, beta, stream_, kBatchOneGemv));
    return absl::OkStatus();
  }
  const float alpha = 1.0f;
  // Row-major y [n, rows] is column-major yᵀ [rows, n] = W · xᵀ, with W row-major [rows, cols]
  // read as column-major [cols, rows] and transposed.
  WITCERT_CUBLAS_OK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                                 static_cast<int>(n), static_cast<int>(cols), &alpha, w,
                                 CUDA_R_16BF, static_cast<int>(cols), x, CUDA_R_16BF,
                                 static_cast<int>(cols), &beta, y, CUDA_R_32F,
                                 static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace witcert
