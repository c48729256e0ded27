// The CUDA backend: the transformer forward pass on one GPU behind the Backend interface,
// computing what CpuBackend computes (engine/backend/cpu) with bf16 weights.
//
// Per layer: RMSNorm → one fused QKV GEMM (cuBLAS, bf16 in, fp32 accumulate and out) →
// bias → RoPE → the quantize-on-write KV kernel (codes + Tier A witness into the paged GPU
// pool, kernels/cuda/paged_kv_cuda.h) → attention → O GEMM accumulated into the residual
// (beta = 1) → RMSNorm → fused gate|up GEMM → SwiGLU → down GEMM into the residual.
// Attention: a prompt chunk at position 0 attends over its own fresh K/V (exact attention on
// tensor cores, no cells, like the CPU backend). Every other row reads the quantized pool and,
// when the item's gate policy is not off, returns a per-(row, head) certificate that becomes
// its CellRecord: a later prompt chunk through the chunked-prefill kernel
// (kernels/cuda/metered_prefill_cuda.h: int8-rtn, d = 128), every other such row as one query
// of the fused metered decode kernel (kernels/cuda/metered_decode_cuda.h). Rows of all
// sequences run as one batch; rows reading stored KV go first (decode rows, then later
// chunks) so the decode kernel reads and writes one contiguous range.
//
// KV memory (why a host KvCache): the engine drives the cache through KvCache& (AddSequence,
// Reserve, FreeSequence, block counts). The backend keeps such a cache with host_storage =
// false for the block accounting only and reads each sequence's physical block ids from it
// (KvCache::BlockIds); the codes, scales and witnesses live in the GPU pool with the same
// block ids. Gate: observe and off are supported; repair (paging exact blocks in) is not yet
// and returns Unimplemented; audit sampling is not done on the GPU (cells are never audited).
// Supported KV: K and V of one GPU scheme (kernels/cuda/kv_scheme_cuda.h), no outlier
// channels, head_dim 64 or 128, Hq/Hkv ≤ 8.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_util.h"
#include "engine/backend/cuda/device_weights.h"
#include "engine/model/model.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cuda/ops/sampling_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/cert_math.h"

namespace witcert {

class CudaBackend : public Backend {
 public:
  struct Options {
    int32_t device = 0;  // CUDA device ordinal
    std::function<void(const std::string&)> progress;  // load progress lines (may be empty)
    // Replay decode-only steps from captured CUDA graphs (see Forward). Off: every kernel
    // is launched from the host each step.
    bool cuda_graphs = true;
  };
  // `model` must outlive the backend (its config is referenced). FailedPrecondition when no
  // CUDA device is usable; Unimplemented for KV options the GPU path does not support.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Model& model,
                                                             const KvCacheOptions& kv_options,
                                                             Options options);
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Model& model,
                                                             const KvCacheOptions& kv_options) {
    return Create(model, kv_options, Options{});
  }
  // True when the CUDA runtime sees at least one device.
  static bool DeviceAvailable();

  ~CudaBackend() override;
  absl::Status Forward(absl::Span<const ForwardItem> batch, ForwardResult* result) override;
  const ModelConfig& config() const override { return config_; }
  KvCache& kv_cache() override { return *kv_; }
  const char* name() const override { return "cuda"; }
  bool SamplesOnDevice() const override { return true; }
  // A 2048-token chunk of an 8B model takes ~0.1 s here (bench_prefill_gpu: 0.425 s for the four
  // chunks of an 8k prompt); larger chunks also mean fewer passes over the stored KV per prompt.
  int32_t DefaultBatchedTokens() const override { return 2048; }
  int64_t weight_bytes() const { return weights_.bytes; }
  // Benchmarks: writes pseudo-random K/V (uniform, unit scale, seeded) for positions
  // [0, num_tokens) of `seq` in every layer through the write-path kernel, without running the
  // model, so decode at a long context can be timed without a long prefill. The positions must
  // be reserved.
  [[nodiscard]] absl::Status FillKvSynthetic(SeqId seq, int64_t num_tokens, uint32_t seed);
  cudaStream_t stream() const { return stream_; }
  // Benchmarks: switch graph replay on or off (drops the captured graphs).
  void set_cuda_graphs(bool on);
  int64_t graphs_captured() const { return graphs_captured_; }
  int64_t graph_failures() const { return graph_failures_; }  // captures that fell back

 private:
  // A run of decode rows sharing one decode-kernel launch (same meter flag and δ_loc).
  struct DecodeGroup {
    int64_t first_row = 0, num_rows = 0;
    int64_t max_context = 0;
    int32_t num_splits = 0;
    bool meter = false;
    double delta_loc = 0.0;
  };
  CudaBackend(const ModelConfig& config, std::unique_ptr<KvCache> kv);
  absl::Status Init(const Model& model, const KvCacheOptions& kv_options, const Options& options);
  absl::Status GrowScratch(int64_t rows, int64_t decode_rows, int64_t logit_rows,
                           int64_t max_blocks);
  void DropGraphs();
  // Samples the logits rows (logits order) that have a request, into sampled_host_ (queued on
  // stream_; valid after the stream syncs).
  absl::Status SampleOnDevice(const std::vector<const SampleRequest*>& rows);
  // y [n, rows] (ld ldy) = x [n, cols] bf16 · W [rows, cols]ᵀ bf16 + beta · y.
  absl::Status Gemm(const uint16_t* x, int64_t n, int64_t cols, const uint16_t* w, int64_t rows,
                    float* y, int64_t ldy, float beta);

  const ModelConfig config_;
  std::unique_ptr<KvCache> kv_;  // block accounting only (host_storage = false)
  PagedKvLayout layout_;
  PagedKvPoolCuda pool_;
  uint64_t dither_seed_ = 0;
  DeviceWeights weights_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  int32_t device_ = 0;
  // CUDA graphs of decode-only steps, keyed by everything the enqueued work depends on
  // besides the packed inputs (shapes, row groups, split counts, buffer addresses).
  bool cuda_graphs_ = true;
  DeviceArray<uint8_t> cublas_workspace_;  // fixed, so cuBLAS never allocates while capturing
  absl::flat_hash_map<std::string, cudaGraphExec_t> graphs_;
  int64_t graphs_captured_ = 0, graph_failures_ = 0;
  // Host threads that turn a step's certificates into CellRecords (a 2048-row prompt chunk of
  // an 8B model is 2M cells).
  std::unique_ptr<ThreadPool> cell_pool_;

  // Device scratch, grown to the batch: N rows, S decode rows, M logit rows.
  DeviceArray<float> x_;           // [N, hidden] residual stream
  DeviceArray<uint16_t> xn_;       // [N, hidden] bf16 normed
  DeviceArray<float> qkv_;         // [N, q_dim + 2·kv_dim]
  DeviceArray<float> q_, k_, v_;   // [N, q_dim], [N, kv_dim], [N, kv_dim]
  DeviceArray<float> attn_;        // [N, q_dim]
  DeviceArray<uint16_t> attn_bf_;  // [N, q_dim]
  DeviceArray<float> gate_up_;     // [N, 2·ffn]
  DeviceArray<uint16_t> act_;      // [N, ffn] bf16
  DeviceArray<float> last_;        // [M, hidden]
  DeviceArray<uint16_t> last_bf_;  // [M, hidden]
  DeviceArray<float> logits_;      // [M, vocab]
  DeviceArray<meter::CertBound> cert_;  // [L, S, Hq]
  DeviceArray<float> out_norm_;         // [L, S, Hq] ‖õ‖ of each decode output
  DeviceArray<uint8_t> workspace_;      // decode kernel split partials
  DeviceArray<uint8_t> inputs_;         // packed per-batch inputs (see Forward)
  PinnedArray<uint8_t> inputs_host_;
  PinnedArray<float> logits_host_;           // [M, vocab]
  PinnedArray<meter::CertBound> cert_host_;  // [L, S, Hq]
  PinnedArray<float> out_norm_host_;         // [L, S, Hq]
  // Device sampling: per-row parameters, penalty lists [tokens | counts], sampled ids [M].
  DeviceArray<SampleRowParams> sample_params_;
  PinnedArray<SampleRowParams> sample_params_host_;
  DeviceArray<int32_t> penalties_;
  PinnedArray<int32_t> penalties_host_;
  DeviceArray<int32_t> sampled_;
  PinnedArray<int32_t> sampled_host_;
};

}  // namespace witcert
