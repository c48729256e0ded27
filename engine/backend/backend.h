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

struct ForwardItem {
  SeqId seq = 0;
  absl::Span<const TokenId> tokens;  // run these, at positions start_pos, start_pos + 1, ...
  int64_t start_pos = 0;
  bool compute_logits = true;        // logits of the last token of the item
  int64_t decode_step = 0;           // the request's decode step (certificate cells)
  double delta_loc = 0.0;            // Tier B budget per cell: δ_req / (L · Hq · T)
  const GatePolicy* policy = nullptr;  // null → meter off for this item
};

struct ForwardResult {
  std::vector<float> logits;  // [items with compute_logits, vocab], in batch order
  // cells[i]: the certificate cells of item i, [layers · num_heads · attended tokens] in
  // (token, layer, head) order; empty when the item read no stored KV.
  std::vector<std::vector<CellRecord>> cells;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Runs one forward pass over `batch`. The KV cache must already hold capacity for every
  // position written (KvCache::Reserve).
  [[nodiscard]] virtual absl::Status Forward(absl::Span<const ForwardItem> batch,
                                             ForwardResult* result) = 0;
  virtual const ModelConfig& config() const = 0;
  virtual KvCache& kv_cache() = 0;
  virtual const char* name() const = 0;
};

}  // namespace witcert
