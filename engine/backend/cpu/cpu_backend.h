// The CPU reference backend: the transformer forward pass over quantized weights, with every
// decode attention read from the metered KV cache.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/model.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/quant_matrix.h"

namespace witcert {

class CpuBackend : public Backend {
 public:
  struct Options {
    int num_threads = 0;  // <= 0 → all cores
    // Multiply by dequantized weights in double (MatmulReference) instead of quantizing
    // activations to 8 bits: slow, for tests that compare against an exact evaluation.
    bool exact_matmul = false;
  };
  // `model` must outlive the backend.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const Model& model,
                                                            const KvCacheOptions& kv_options,
                                                            Options options);
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const Model& model,
                                                            const KvCacheOptions& kv_options) {
    return Create(model, kv_options, Options{});
  }

  absl::Status Forward(absl::Span<const ForwardItem> batch, ForwardResult* result) override;
  const ModelConfig& config() const override { return config_; }
  KvCache& kv_cache() override { return *kv_; }
  const char* name() const override { return "cpu"; }
  // On two cores prefill runs ~250–430 tok/s (bench/RESULTS.md), so 512 tokens are already
  // 1–2 s of a step every running sequence waits for.
  int32_t DefaultBatchedTokens() const override { return 512; }

 private:
  CpuBackend(const Model& model, std::unique_ptr<KvCache> kv, Options options);
  void MatmulRows(const float* x, int64_t n, const QuantMatrix& w, float* y);
  // Several matrices over the same activations (quantized once); ys[k] [n, ws[k]->rows].
  void MatmulRowsMany(const float* x, int64_t n, std::initializer_list<const QuantMatrix*> ws,
                      std::initializer_list<float*> ys);

  // Causal attention of rows [first_row, first_row + num_tokens) over `prefix_len` earlier
  // positions held exact in prefix_k_ / prefix_v_ [Hkv, prefix_len, d] (0: a prompt from
  // position 0) and over themselves. A row computes exactly what it would in one chunk from
  // position 0: the same scores in the same order. No compressed K/V is involved (fresh fp32
  // rows or a cached prefix's exact copies), so there is no certificate cell to record.
  void CausalAttention(int64_t first_row, int64_t num_tokens, int64_t prefix_len);
  // A prefix-cache hit's prompt rows: the cached positions' exact K/V from the backing store
  // into prefix_k_ / prefix_v_, then CausalAttention.
  absl::Status ExactPrefixAttention(const ForwardItem& item, int64_t first_row, int32_t layer);
  // Attention of `item` over stored K/V, metered; `pool` (may be null) parallelizes its KV
  // heads. Safe to run concurrently for different items.
  absl::Status StoredAttention(const ForwardItem& item, int64_t first_row, int32_t layer,
                               std::vector<CellRecord>* cells, ThreadPool* pool);

  // Row-interleaved copies of the Q4_0 / Q4_1 / Q8_0 matrices (packed_x8.h), built once
  // here; the batched and single-row matmuls both run on them (the scalar kernels' bits).
  void PackWeights();

  const Model& model_;
  const ModelConfig& config_;
  std::unique_ptr<KvCache> kv_;
  ThreadPool pool_;
  const bool exact_matmul_;
  Weights weights_;                          // the model's views, with packed_x8 set
  std::vector<std::vector<uint8_t>> packed_;  // owns what weights_.*.packed_x8 point to

  // Scratch, grown to the batch's token count N.
  std::vector<float> x_;       // [N, hidden] residual stream
  std::vector<float> xn_;      // [N, hidden] normed
  std::vector<float> q_;       // [N, q_dim]
  std::vector<float> k_;       // [N, kv_dim]
  std::vector<float> v_;       // [N, kv_dim]
  std::vector<float> attn_;    // [N, q_dim]
  std::vector<float> proj_;    // [N, hidden]
  std::vector<float> gate_;    // [N, ffn]
  std::vector<float> up_;      // [N, ffn]
  std::vector<float> prefix_k_, prefix_v_;  // [Hkv, prefix, d] exact cached K/V
  std::vector<float> rope_cs_; // [N, head_dim] RoPE (cos, sin) per row's position
};

}  // namespace witcert
