#include "engine/runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "engine/runtime/choice_constraint.h"
#include "spdlog/spdlog.h"

namespace witcert {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

absl::Status ValidateSampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || p.temperature > 100.0f)
    return absl::InvalidArgumentError("temperature must be in [0, 100]");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return absl::InvalidArgumentError("top_p must be in (0, 1]");
  if (p.top_k < 0) return absl::InvalidArgumentError("top_k must be >= 0");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return absl::InvalidArgumentError("min_p must be in [0, 1]");
  if (!(std::fabs(p.presence_penalty) <= 2.0f))
    return absl::InvalidArgumentError("presence_penalty must be in [-2, 2]");
  if (!(std::fabs(p.frequency_penalty) <= 2.0f))
    return absl::InvalidArgumentError("frequency_penalty must be in [-2, 2]");
  if (p.top_logprobs < 0 || p.top_logprobs > 20)
    return absl::InvalidArgumentError("top_logprobs must be in [0, 20]");
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f))
    return absl::InvalidArgumentError("repetition_penalty must be in (0, 2]");
  return absl::OkStatus();
}

}  // namespace

Engine::Engine(std::unique_ptr<Backend> backend, const Tokenizer& tokenizer,
               EngineOptions options)
    : backend_(std::move(backend)),
      tokenizer_(tokenizer),
      options_(options),
      scheduler_(options.scheduler),
      layer_head_stats_(backend_->config().num_layers, backend_->config().num_heads),
      policy_(options.gate) {
  if (options_.max_context <= 0) options_.max_context = backend_->config().context_length;
  int32_t threads = options_.sampling_threads;
  if (threads <= 0) {
    threads = static_cast<int32_t>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  }
  sample_pool_ = std::make_unique<ThreadPool>(threads);
  token_bytes_ = std::make_unique<TokenByteTable>(tokenizer_);
  for (int32_t id = 0; id < token_bytes_->vocab_size(); ++id) {
    if (token_bytes_->is_end(id)) end_of_generation_ids_.push_back(id);
  }
  json_mask_ = std::make_unique<JsonTokenMask>(*token_bytes_);
  loop_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(Request request) {
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (request.stop.max_tokens < 1)
    return absl::InvalidArgumentError("max_tokens must be at least 1");
  if (absl::Status s = ValidateSampling(request.sampling); !s.ok()) return s;
  if (request.sampling.json_object && !request.sampling.guided_choice.empty()) {
    return absl::InvalidArgumentError("guided_choice and JSON mode cannot be combined");
  }
  if (request.stop.stop.size() > kMaxStopStrings || request.stop.stop_token_ids.size() > kMaxStopTokenIds ||
      request.sampling.logit_bias.size() > kMaxLogitBias || request.sampling.guided_choice.size() > kMaxGuidedChoices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a request may hold at most %d stop strings, %d stop_token_ids, %d logit_bias entries and %d guided_choice "
        "choices; this one has %d, %d, %d and %d",
        kMaxStopStrings, kMaxStopTokenIds, kMaxLogitBias, kMaxGuidedChoices, request.stop.stop.size(),
        request.stop.stop_token_ids.size(), request.sampling.logit_bias.size(), request.sampling.guided_choice.size()));
  }
  for (const std::string& choice : request.sampling.guided_choice) {
    if (choice.empty() || choice.size() > kMaxGuidedChoiceBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("guided_choice: the choices must be non-empty and at most %d bytes", kMaxGuidedChoiceBytes));
    }
  }
  for (const std::string& stop : request.stop.stop) {
    if (stop.empty()) return absl::InvalidArgumentError("stop strings must not be empty");
  }
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id < 0 || id >= tokenizer_.vocab_size() || !(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "logit_bias: token %d → %g (ids must be in the vocabulary of %d, biases in [-100, 100])", id, bias,
          tokenizer_.vocab_size()));
    }
  }
  if (request.stop.min_tokens < 0 || request.stop.min_tokens > request.stop.max_tokens) {
    return absl::InvalidArgumentError("min_tokens must be in [0, max_tokens]");
  }
  for (int32_t id : request.stop.stop_token_ids) {
    if (id < 0 || id >= tokenizer_.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stop_token_ids: %d is outside the vocabulary (%d)", id, tokenizer_.vocab_size()));
    }
  }
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len >= options_.max_context) {
    return absl::OutOfRangeError(absl::StrFormat(
        "the prompt has %d tokens; this model's context is %d tokens", prompt_len,
        options_.max_context));
  }
  // Generation stops at the context length ("length") rather than failing.
  request.stop.max_tokens = static_cast<int32_t>(
      std::min<int64_t>(request.stop.max_tokens, options_.max_context - prompt_len));
  const int64_t needed = prompt_len + request.stop.max_tokens;
  KvCache& kv = backend_->kv_cache();
  const int64_t block = kv.block_size();
  if ((needed + block - 1) / block > kv.num_total_blocks()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request needs %d tokens of KV cache; the pool holds %d", needed,
        kv.num_total_blocks() * block));
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= backend_->config().vocab_size)
      return absl::InvalidArgumentError(absl::StrFormat("token id %d out of range", t));
  }
  auto stream = std::make_shared<RequestStream>(request.id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the engine is shutting down");
    auto seq = std::make_unique<Sequence>(next_seq_id_++, std::move(request), stream, tokenizer_);
    seq->policy = RequestPolicy(policy_, seq->request);
    // δ_loc = δ_req / (L · Hq · T), T = the request's decode steps (prefill chunks that read
    // the store are covered by the slack of one extra step per preemption-free chunk).
    const ModelConfig& c = backend_->config();
    const int64_t steps = seq->request.stop.max_tokens +
                          (prompt_len + options_.scheduler.max_batched_tokens - 1) /
                              std::max(1, options_.scheduler.max_batched_tokens);
    seq->delta_loc = LocalDelta(seq->policy.delta_req, c.num_layers, c.num_heads, steps);
    incoming_.push_back(std::move(seq));
  }
  cv_.notify_one();
  return stream;
}

void Engine::ReloadPolicy(const GatePolicy& policy) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_ = policy;
}

GatePolicy Engine::policy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_;
}

EngineStats Engine::Stats() const {
  EngineStats s;
  s.running = stat_running_.load();
  s.waiting = stat_waiting_.load();
  s.kv_blocks_total = backend_->kv_cache().num_total_blocks();
  s.kv_blocks_free = backend_->kv_cache().num_free_blocks();
  s.preemptions = stat_preemptions_.load();
  s.prompt_tokens = stat_prompt_tokens_.load();
  s.generation_tokens = stat_generation_tokens_.load();
  s.steps = stat_steps_.load();
  return s;
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() ||
               scheduler_.num_running() + scheduler_.num_waiting() > 0;
      });
      if (stopping_) break;
      for (auto& seq : incoming_) {
        stat_prompt_tokens_ += static_cast<int64_t>(seq->request.prompt.size());
        scheduler_.Add(std::move(seq));
      }
      incoming_.clear();
    }
    Step();
  }
  for (Sequence* seq : scheduler_.All()) Finish(seq, FinishReason::kCancelled);
}

void Engine::Finish(Sequence* seq, FinishReason reason, absl::Status status) {
  RequestEvent event;
  event.kind = RequestEvent::Kind::kFinish;
  event.finish_reason = reason;
  event.status = std::move(status);
  event.usage.prompt_tokens = static_cast<int64_t>(seq->request.prompt.size());
  event.usage.completion_tokens = seq->num_generated();
  event.risk = seq->risk.Summary();
  event.total_time_s = SecondsSince(seq->arrival);
  event.time_to_first_token_s =
      seq->has_first_token
          ? std::chrono::duration<double>(seq->first_token - seq->arrival).count()
          : 0.0;
  std::shared_ptr<RequestStream> stream = seq->stream;
  scheduler_.Remove(seq, backend_->kv_cache());  // frees the KV blocks; `seq` is gone
  stat_running_ = scheduler_.num_running();
  stat_waiting_ = scheduler_.num_waiting();
  stream->Push(std::move(event));
}

bool Engine::Emit(Sequence* seq, SampledToken sampled, std::vector<CellRecord>& cells) {
  seq->tokens.push_back(sampled.token);
  if (seq->request.sampling.json_object) json_mask_->Advance(sampled.token, &seq->json);
  if (!seq->request.sampling.guided_choice.empty() && sampled.token >= 0 &&
      sampled.token < token_bytes_->vocab_size()) {
    seq->constrained_output += token_bytes_->bytes(sampled.token);
  }
  ++stat_generation_tokens_;
  if (!seq->has_first_token) {
    seq->has_first_token = true;
    seq->first_token = std::chrono::steady_clock::now();
  }
  if (!cells.empty() && seq->request.emit_cells) {
    RequestEvent cell_event;
    cell_event.kind = RequestEvent::Kind::kCells;
    cell_event.cells = std::move(cells);  // the step is done with them
    seq->stream->Push(std::move(cell_event));
  }

  const std::vector<int32_t>& stop_ids = seq->request.stop.stop_token_ids;
  const bool eog = (!seq->request.stop.ignore_eos && tokenizer_.IsEndOfGeneration(sampled.token)) ||
                   std::find(stop_ids.begin(), stop_ids.end(), sampled.token) != stop_ids.end();
  bool stopped = false;
  std::string text;
  if (!eog) text = seq->stop_matcher.Push(seq->detokenizer.Push(sampled.token), &stopped);
  const bool length = seq->num_generated() >= seq->request.stop.max_tokens;
  if ((eog || length) && !stopped) {
    text += seq->stop_matcher.Push(seq->detokenizer.Flush(), &stopped);
    if (!stopped) text += seq->stop_matcher.Flush();
  }
  RequestEvent event;
  event.kind = RequestEvent::Kind::kToken;
  event.token = std::move(sampled);
  event.text = std::move(text);
  seq->stream->Push(std::move(event));

  if (eog || stopped) {
    Finish(seq, FinishReason::kStop);
    return true;
  }
  if (length) {
    Finish(seq, FinishReason::kLength);
    return true;
  }
  return false;
}

std::vector<int32_t> Engine::BannedTokens(const Sequence& seq) const {
  if (seq.num_generated() >= seq.request.stop.min_tokens) return {};
  // A closed JSON object allows nothing but the end: the floor gives way rather than leave no
  // token to pick.
  if (seq.request.sampling.json_object && seq.json.Complete()) return {};
  if (!seq.request.sampling.guided_choice.empty() &&
      ChoiceComplete(seq.request.sampling.guided_choice, seq.constrained_output)) {
    return {};
  }
  std::vector<int32_t> banned = end_of_generation_ids_;
  banned.insert(banned.end(), seq.request.stop.stop_token_ids.begin(), seq.request.stop.stop_token_ids.end());
  return banned;
}

void Engine::Step() {
  // Cancelled requests leave first, freeing their blocks.
  for (Sequence* seq : scheduler_.All()) {
    if (seq->stream->cancelled()) Finish(seq, FinishReason::kCancelled);
  }
  KvCache& kv = backend_->kv_cache();
  StepPlan plan = scheduler_.Schedule(kv);
  stat_preemptions_ = scheduler_.total_preemptions();
  stat_running_ = scheduler_.num_running();
  stat_waiting_ = scheduler_.num_waiting();
  if (plan.empty()) {
    // Nothing fits right now; running sequences will free blocks. Avoid a hot spin.
    if (scheduler_.num_running() == 0 && scheduler_.num_waiting() > 0) {
      for (Sequence* seq : scheduler_.All())
        Finish(seq, FinishReason::kError,
               absl::ResourceExhaustedError("the KV pool cannot hold this request"));
    }
    return;
  }

  std::vector<ForwardItem> items;
  items.reserve(plan.chunks.size());
  // Device sampling: the rows the backend can sample get the request's parameters and one
  // draw from the sequence's RNG (stable storage: items point into it).
  const bool device_sampling = backend_->SamplesOnDevice();
  std::vector<SampleRequest> samples(plan.chunks.size());
  for (const ScheduledChunk& chunk : plan.chunks) {
    Sequence* seq = chunk.seq;
    ForwardItem item;
    item.seq = seq->id;
    item.tokens = absl::Span<const TokenId>(seq->tokens.data() + chunk.begin,
                                            chunk.end - chunk.begin);
    item.start_pos = chunk.begin;
    item.exact_prefix = chunk.exact_prefix();
    item.compute_logits = chunk.finishes_prompt();
    item.decode_step = seq->decode_steps;
    item.delta_loc = seq->delta_loc;
    item.policy = seq->policy.mode == GateMode::kOff ? nullptr : &seq->policy;
    if (device_sampling && item.compute_logits && seq->sampler.CanSampleOnDevice() &&
        seq->num_generated() >= seq->request.stop.min_tokens) {
      const SamplingParams& sp = seq->sampler.params();
      SampleRequest& r = samples[items.size()];
      r.temperature = sp.temperature;
      r.top_p = sp.top_p;
      r.top_k = sp.top_k;
      r.min_p = sp.min_p;
      r.presence_penalty = sp.presence_penalty;
      r.frequency_penalty = sp.frequency_penalty;
      r.uniform = seq->sampler.NextUniform();
      r.generated = seq->generated();
      item.sample = &r;
    }
    items.push_back(item);
  }
  ForwardResult& result = step_result_;  // kept across steps: its cell buffers are reused
  absl::Status status = backend_->Forward(items, &result);
  ++stat_steps_;
  if (!status.ok()) {
    spdlog::error("forward pass failed: {}", status.ToString());
    for (const ScheduledChunk& chunk : plan.chunks) Finish(chunk.seq, FinishReason::kError, status);
    return;
  }
  // Sample every row that produced logits, in parallel: each sequence owns its sampler and
  // RNG, so the tokens do not depend on how the rows are spread over threads.
  const int32_t vocab = backend_->config().vocab_size;
  std::vector<size_t> emitting;  // chunk indices, in logits order
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (items[i].compute_logits) emitting.push_back(i);
  }
  // Rows the device sampled only take its token; the others run the host sampler.
  std::vector<SampledToken> sampled(emitting.size());
  std::vector<int64_t> host_rows;
  for (size_t r = 0; r < emitting.size(); ++r) {
    if (!result.sampled.empty() && result.sampled[r] >= 0) {
      sampled[r].token = result.sampled[r];
    } else {
      host_rows.push_back(static_cast<int64_t>(r));
    }
  }
  auto sample_rows = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = host_rows[i];
      Sequence* seq = plan.chunks[emitting[r]].seq;
      const std::vector<int32_t> banned = BannedTokens(*seq);
      float* logits = &result.logits[r * vocab];  // [vocab]
      const SamplingParams& sp = seq->request.sampling;
      if (sp.json_object || !sp.guided_choice.empty()) {  // output constraints: mask the rest
        std::vector<uint8_t> allowed;
        if (sp.json_object) json_mask_->Allowed(seq->json, &allowed);
        else ChoiceAllowed(sp.guided_choice, seq->constrained_output, *token_bytes_, &allowed);
        for (int32_t t = 0; t < vocab; ++t) {  // ids past the tokenizer's have no bytes
          if (static_cast<size_t>(t) >= allowed.size() || !allowed[t]) {
            logits[t] = -std::numeric_limits<float>::infinity();
          }
        }
      }
      sampled[r] = seq->sampler.Sample(absl::Span<float>(logits, vocab), seq->generated(), seq->tokens,
                                       banned);
    }
  };
  const int64_t num_host = static_cast<int64_t>(host_rows.size());
  if (num_host > 1) {
    sample_pool_->ParallelFor(num_host, 1, sample_rows);
  } else {
    sample_rows(0, num_host);
  }

  size_t emit_index = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Sequence* seq = plan.chunks[i].seq;
    seq->num_computed = plan.chunks[i].end;
    kv.PublishPrefix(seq->id, seq->tokens, seq->num_computed);
    std::vector<CellRecord>& cells = result.cells[i];
    if (!cells.empty()) {
      ++seq->decode_steps;
      for (const CellRecord& cell : cells) {
        seq->risk.Add(cell, seq->delta_loc, seq->policy.tv_threshold);
        if (options_.trace != nullptr) options_.trace->Write(seq->id, cell);
      }
      layer_head_stats_.AddAll(cells, seq->policy.tv_threshold);
    }
    if (!items[i].compute_logits) continue;
    SampledToken& token = sampled[emit_index++];
    if (seq->stream->cancelled()) {
      Finish(seq, FinishReason::kCancelled);
      continue;
    }
    Emit(seq, std::move(token), cells);
  }
}

}  // namespace witcert
