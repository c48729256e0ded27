// The engine: one thread that owns the model state and runs the continuous-batching loop.
//
// Front ends call Submit() from any thread and read the returned RequestStream; the loop
// schedules, runs the backend, samples, detokenizes and pushes events. Nothing here knows
// HTTP, gRPC, JSON or Prometheus; Stats() is what the metrics layer reads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/cert/records.h"
#include "engine/gate/gate_policy.h"
#include "engine/runtime/request.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/json_prefix.h"
#include "engine/runtime/scheduler.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/parallel.h"

namespace witcert {

struct EngineOptions {
  SchedulerOptions scheduler;
  GatePolicy gate;            // the policy in force at start (ReloadPolicy swaps it)
  int32_t max_context = 0;    // 0 → the model's context length
  TraceWriter* trace = nullptr;  // receives every cell when set; must outlive the engine
  // Threads that sample a step's rows on the host in parallel (each row is a pass over the
  // whole vocabulary; a batch of 64 would otherwise serialize behind the loop thread).
  // 0 → min(cores, 8).
  int32_t sampling_threads = 0;
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_free = 0;
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t steps = 0;
};

class Engine {
 public:
  Engine(std::unique_ptr<Backend> backend, const Tokenizer& tokenizer, EngineOptions options);
  ~Engine();  // cancels what is in flight and joins the loop
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and enqueues. InvalidArgument for an empty prompt or bad sampling values,
  // OutOfRange when prompt + max_tokens exceeds the context, ResourceExhausted when the
  // request could never fit in the KV pool even alone.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(Request request);

  // Swaps the gate policy in force; requests admitted later use it (running ones keep
  // theirs, so a request's δ budget stays consistent).
  void ReloadPolicy(const GatePolicy& policy);
  GatePolicy policy() const;

  EngineStats Stats() const;
  const ModelConfig& config() const { return backend_->config(); }
  // The longest sequence (prompt + generated) a request may reach: the configured max_context,
  // else the model's context length.
  int32_t max_context() const { return options_.max_context; }
  // A prompt already computed for another request is reused from the KV cache (the backend's
  // cache lists prompt prefixes): front ends then start a prompt's other choices once its
  // first has been prefilled, so the prompt is computed once.
  bool ReusesPromptPrefixes() const { return backend_->kv_cache().options().prefix_caching; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  Backend& backend() { return *backend_; }
  // Per-(layer, head) certificate counters, for metrics.
  const RiskCounters& layer_head_stats() const { return layer_head_stats_; }

 private:
  void Loop();
  void Step();
  // Detokenizes and emits the token sampled for one chunk that produced logits. Returns true
  // when the sequence finished.
  bool Emit(Sequence* seq, SampledToken sampled, std::vector<CellRecord>& cells);
  void Finish(Sequence* seq, FinishReason reason, absl::Status status = absl::OkStatus());

  // The tokens a sequence may not sample yet (min_tokens): end-of-generation and its
  // stop_token_ids, while it has generated fewer than min_tokens (and, in JSON mode, the
  // object is still open); else empty.
  std::vector<int32_t> BannedTokens(const Sequence& seq) const;

  std::unique_ptr<Backend> backend_;
  // The last step's result, kept so that the next step reuses its buffers (a long prompt chunk's
  // certificate cells are ~100 MB: engine/backend/cell_buffers.h). Only the engine loop touches it.
  ForwardResult step_result_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> end_of_generation_ids_;  // every id Tokenizer::IsEndOfGeneration accepts
  std::unique_ptr<TokenByteTable> token_bytes_;  // every token's bytes, for the output constraints
  std::unique_ptr<JsonTokenMask> json_mask_;      // JSON mode's masks (over token_bytes_)
  std::unique_ptr<ThreadPool> sample_pool_;
  EngineOptions options_;
  Scheduler scheduler_;
  RiskCounters layer_head_stats_;

  mutable std::mutex mu_;  // guards incoming_, policy_, stopping_
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> incoming_;
  GatePolicy policy_;
  bool stopping_ = false;
  SeqId next_seq_id_ = 1;

  std::atomic<int32_t> stat_running_{0}, stat_waiting_{0};
  std::atomic<int64_t> stat_prompt_tokens_{0}, stat_generation_tokens_{0}, stat_steps_{0};
  std::atomic<int64_t> stat_preemptions_{0};
  std::thread loop_;
};

}  // namespace witcert
