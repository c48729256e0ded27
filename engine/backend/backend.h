// The one narrow interface between the engine and the hardware that runs the model.
//
// The scheduler hands the backend a batch of (sequence, tokens) items; the backend runs the
// transformer over them, writes their K/V through the metered KV cache, meters every decode
// attention cell and returns logits. The CPU backend is the reference; the CUDA backend
// implements the same contract.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/cert/records.h"
#include "engine/gate/gate_policy.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model_config.h"

namespace witcert {

using TokenId = int32_t;

// Sample an item's next token on the device (Backend::SamplesOnDevice): the request's
// sampling parameters, its generated tokens (for the penalties) and one uniform draw from the
// sequence's RNG. The backend then returns the token instead of needing the logits on the host.
struct SampleRequest {
  float temperature = 1.0f;  // ≤ 0 → greedy
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  double uniform = 0.0;                 // U[0, 1)
  absl::Span<const int32_t> generated;  // the sequence's generated tokens so far
};

struct ForwardItem {
  SeqId seq = 0;
  absl::Span<const TokenId> tokens;  // run these, at positions start_pos, start_pos + 1, ...
  int64_t start_pos = 0;
  // Positions [0, start_pos) are a prefix-cache hit. The CPU backend attends them exact (from
  // its backing store), as if this item's prompt rows had been computed in one chunk from
  // position 0. The CUDA backend keeps no exact copy of every block: it reads the prefix as
  // stored, metered, like a later prompt chunk (the item's cells cover those rows).
  bool exact_prefix = false;
  bool compute_logits = true;        // logits of the last token of the item
  int64_t decode_step = 0;           // the request's decode step (certificate cells)
  double delta_loc = 0.0;            // Tier B budget per cell: δ_req / (L · Hq · T)
  const GatePolicy* policy = nullptr;  // null → meter off for this item
  const SampleRequest* sample = nullptr;  // non-null (and compute_logits): sample on the device
};

// Whether an item's rows are metered (a gate policy that is not off), and repaired.
inline bool MeterOn(const ForwardItem& item) {
  return item.policy != nullptr && item.policy->mode != GateMode::kOff;
}
inline bool RepairOn(const ForwardItem& item) {
  return item.policy != nullptr && item.policy->mode == GateMode::kRepair;
}
// The form of the item's Tier B cells (GatePolicy::tier_b_form): per-token where the meter is off,
// so unmetered items never differ by it.
inline meter::TierBForm TierBFormOf(const ForwardItem& item) {
  return MeterOn(item) ? item.policy->tier_b_form : meter::TierBForm::kPerToken;
}

struct ForwardResult {
  // [items with compute_logits, vocab], in batch order; empty when every such item was
  // sampled on the device.
  std::vector<float> logits;
  // [items with compute_logits]: the token sampled on the device, -1 for items without a
  // SampleRequest; empty when the backend sampled none.
  std::vector<int32_t> sampled;
  // cells[i]: the certificate cells of item i, [layers · num_heads · attended tokens] in
  // (token, layer, head) order; empty when the item read no stored KV.
  std::vector<std::vector<CellRecord>> cells;
};

// KV cache options with the model's shape (layers, KV heads, head_dim, RoPE pairing) and the
// defaults for everything else.
inline KvCacheOptions KvCacheOptionsFor(const ModelConfig& c) {
  KvCacheOptions o;
  o.num_layers = c.num_layers;
  o.num_kv_heads = c.num_kv_heads;
  o.head_dim = c.head_dim;
  o.rope_pairing = c.rope_pairing;
  return o;
}

// The first check of every backend's Create: the KV cache has the model's shape.
inline absl::Status CheckKvMatchesModel(const ModelConfig& c, const KvCacheOptions& kv) {
  if (kv.num_layers != c.num_layers || kv.num_kv_heads != c.num_kv_heads || kv.head_dim != c.head_dim) {
    return absl::InvalidArgumentError("KV cache options do not match the model's shape");
  }
  return absl::OkStatus();
}

class Backend {
 public:
  virtual ~Backend() = default;
  // Runs one forward pass over `batch`. The KV cache must already hold capacity for every
  // position written (KvCache::Reserve).
  [[nodiscard]] virtual absl::Status Forward(absl::Span<const ForwardItem> batch,
                                             ForwardResult* result) = 0;
  virtual const ModelConfig& config() const = 0;
  virtual KvCache& kv_cache() = 0;
  // The KV cache's counters as the operator sees them (metrics). Safe to call from another
  // thread than Forward's. A backend that keeps the gate's exact copies itself (CUDA) reports
  // those.
  virtual KvCacheStats KvStats() { return kv_cache().stats(); }
  virtual const char* name() const = 0;
  // True when Forward honours ForwardItem::sample.
  virtual bool SamplesOnDevice() const { return false; }
  // Tokens per forward pass (the prefill chunk budget) when the config leaves it to the backend.
  virtual int32_t DefaultBatchedTokens() const { return 512; }
};

}  // namespace witcert
