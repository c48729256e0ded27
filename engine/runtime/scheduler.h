// Continuous-batching scheduler: decides, each step, which sequences run and how many of
// their tokens, within the KV pool's capacity.
//
// Policy (vLLM-like): running decodes first, one token each; when the pool cannot grow a
// running sequence, the most recently admitted one is preempted (blocks freed, recomputed
// later from its tokens). The remaining token budget goes to prefill chunks: running
// prefills first, then waiting requests in arrival order. No GPU, no model: testable alone.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/runtime/sequence.h"

namespace witcert {

struct SchedulerOptions {
  int32_t max_running = 64;          // sequences in the running set
  int32_t max_batched_tokens = 512;  // tokens per forward pass (decode + prefill chunks), ≥ 1
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t begin = 0;  // token index of the first token to run
  int64_t end = 0;    // one past the last
  // A prompt's first chunk after a prefix-cache hit (KvCache::AttachPrefix at admission):
  // tokens [0, begin) were attached, not computed, and the chunk attends them exact
  // (ForwardItem::exact_prefix).
  bool exact_prefix() const { return begin > seq->num_computed; }
  bool finishes_prompt() const {
    return end == static_cast<int64_t>(seq->tokens.size());
  }
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // decodes first, then prefill chunks
  int64_t num_tokens = 0;
  int32_t num_preempted = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options) : options_(options) {}

  void Add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }
  // Plans one step and reserves KV capacity for it.
  StepPlan Schedule(KvCache& kv);
  // Removes a finished or cancelled sequence and frees its KV blocks.
  std::unique_ptr<Sequence> Remove(Sequence* seq, KvCache& kv);

  // Every sequence the scheduler holds (running first, then waiting).
  std::vector<Sequence*> All();
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int64_t total_preemptions() const { return total_preemptions_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  void Preempt(std::list<std::unique_ptr<Sequence>>::iterator it, KvCache& kv);

  SchedulerOptions options_;
  std::list<std::unique_ptr<Sequence>> running_;   // in admission order
  std::deque<std::unique_ptr<Sequence>> waiting_;  // arrival order; preempted go first
  int64_t total_preemptions_ = 0;
};

}  // namespace witcert
