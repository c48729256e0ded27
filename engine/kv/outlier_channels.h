// Outlier channel bypass: the top-m channels of each (layer, KV head), for K and V
// separately, are stored exact beside the codes and the codec quantizes the rest.
//
// Why fixed per (layer, KV head) and chosen from the first block: outlier channels are a
// property of the model's projections (they recur in every sequence), and a fixed set keeps
// the stored layout uniform (m exact values per vector, no per-token index). The first block
// of any sequence that fills at a layer chooses that layer's channels; until then the cache
// keeps that layer's unfilled blocks exact. Scores are Σ_t |x_{t,c}| over the block. Both
// backends write a batch in batch order until the choice, so it comes from the first item's
// block that fills (CpuBackend, CudaBackend).
//
// Why "fill": to make the codec's scales ignore the outliers without a new codec interface,
// each outlier channel is replaced, before encoding, by the value of the nearest non-outlier
// channel in the same aligned 32-channel group (else the nearest anywhere). That value lies
// inside the range the non-outlier channels already span — per-token absmax, per-token
// min/max, per-group (int4) or per-channel (kivi2 keys) — so every scale equals the one
// computed over the non-outlier channels only. After decoding, the exact values are put back:
// the residual is exactly zero on outlier channels and the witness reflects it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace witcert {

class OutlierChannels {
 public:
  static constexpr int32_t kFillGroup = 32;

  // m = 0 disables the bypass. Requires 0 ≤ m < head_dim.
  OutlierChannels(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim, int32_t m);

  int32_t count() const { return m_; }
  // True once `layer`'s channels are fixed (acquire: the tables are then readable).
  bool chosen(int32_t layer) const;
  // Fixes `layer`'s channels from one block's exact rows k, v [n, num_kv_heads, head_dim]
  // unless another block already did. Thread-safe.
  void ChooseOnce(int32_t layer, const float* k, const float* v, int32_t n);
  // The m chosen channels, ascending: [m]. Only after chosen(layer).
  const int32_t* channels(int32_t layer, int32_t kv_head, bool is_value) const {
    return &channels_[Index(layer, kv_head, is_value) * m_];
  }
  // Per channel c: c itself, the channel whose value fills outlier c, or −1 (fill 0): [d].
  // Only after chosen(layer) (the CUDA write path takes this table as it is).
  const int32_t* fill_sources(int32_t layer, int32_t kv_head, bool is_value) const {
    return &fill_src_[Index(layer, kv_head, is_value) * head_dim_];
  }
  // x [d] → filled [d]: outlier channels replaced as the file comment says.
  void Fill(int32_t layer, int32_t kv_head, bool is_value, const float* x, float* filled) const;
  // Bytes of the channel tables (fixed, independent of tokens).
  int64_t table_bytes() const {
    return static_cast<int64_t>(channels_.size() + fill_src_.size()) * sizeof(int32_t);
  }

 private:
  int64_t Index(int32_t layer, int32_t kv_head, bool is_value) const {
    return (static_cast<int64_t>(layer) * num_kv_heads_ + kv_head) * 2 + (is_value ? 1 : 0);
  }
  void ChooseOne(int64_t index, const float* x, int32_t n, int64_t row_stride);

  const int32_t num_layers_, num_kv_heads_, head_dim_, m_;
  std::vector<int32_t> channels_;  // [L, Hkv, 2, m]
  std::vector<int32_t> fill_src_;  // [L, Hkv, 2, d]: source channel, c itself, or −1 (zero)
  std::unique_ptr<std::atomic<bool>[]> chosen_;  // [L]
  absl::Mutex mu_;  // serializes ChooseOnce
};

}  // namespace witcert
