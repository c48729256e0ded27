// Metered decode attention for one sequence, one layer, one step, all query heads: the entry
// point the forward pass calls (certificates.md §3-§6).
//
// For each KV head: decode its context from the cache (promoted blocks read exact), run the
// metered kernel for every query head of its GQA group (h reads KV head h / (Hq/Hkv)), and,
// in repair mode, while a cell is uncertified and the page-in budget allows: rank blocks by
// their share of A − 1, page the riskiest block's exact copy in, recompute. Audit mode
// compares a deterministic sample of cells with the exact attention.
//
// Thread safety: safe to call concurrently for different sequences (see KvCache).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cert/records.h"
#include "engine/gate/gate_policy.h"
#include "engine/kv/kv_cache.h"

namespace witcert {

class ThreadPool;

struct DecodeAttentionRequest {
  SeqId seq = 0;
  int32_t layer = 0;
  int64_t step = 0;
  int64_t context_len = 0;           // tokens [0, context_len) are read from the cache
  const float* q = nullptr;          // [num_q_heads, head_dim] post-RoPE
  float* out = nullptr;              // [num_q_heads, head_dim]
  CellRecord* cells = nullptr;       // [num_q_heads], filled when the meter is on (may be null)
  const GatePolicy* policy = nullptr;// null: meter off
  double delta_loc = 0.0;            // Tier B per-cell δ (LocalDelta); 0: Tier B off
  int32_t num_splits = 1;            // split-KV partitions (results invariant)
};

// `pool` (optional) runs the KV heads of an observe/off call in parallel; repair calls stay
// serial (they page blocks into the sequence's table under one shared budget).
[[nodiscard]] absl::Status MeteredDecodeAttention(KvCache& kv, const DecodeAttentionRequest& req,
                                                  int32_t num_q_heads,
                                                  RiskCounters* counters = nullptr,
                                                  ThreadPool* pool = nullptr);

}  // namespace witcert
