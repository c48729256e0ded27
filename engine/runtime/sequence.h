// One request's state inside the engine: its tokens, how many are in the KV cache, and
// the per-request machinery (sampler, detokenizer, stop matcher, risk accumulator).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "engine/cert/records.h"
#include "engine/kv/kv_cache.h"
#include "engine/runtime/json_prefix.h"
#include "engine/runtime/request.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/stop_matcher.h"
#include "engine/tokenizer/tokenizer.h"

namespace witcert {

struct Sequence {
  Sequence(SeqId id, Request request, std::shared_ptr<RequestStream> stream,
           const Tokenizer& tokenizer)
      : id(id), request(std::move(request)), stream(std::move(stream)),
        sampler(this->request.sampling), detokenizer(tokenizer),
        stop_matcher(this->request.stop.stop) {
    tokens = this->request.prompt;
  }

  SeqId id;
  Request request;
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> tokens;     // prompt followed by generated tokens
  int64_t num_computed = 0;        // tokens whose K/V are in the cache
  int64_t num_generated() const {
    return static_cast<int64_t>(tokens.size() - request.prompt.size());
  }
  // The generated tokens (what the penalties count).
  absl::Span<const int32_t> generated() const {
    return absl::Span<const int32_t>(tokens.data() + request.prompt.size(), num_generated());
  }
  JsonPrefix json;                 // JSON mode: the output so far, as a JSON prefix
  std::string constrained_output;  // guided choice: the bytes generated so far
  int64_t decode_steps = 0;        // forward passes that read stored KV (certificate steps)
  int32_t preemptions = 0;
  GatePolicy policy;               // the policy in force, tightened by the request
  double delta_loc = 0.0;

  Sampler sampler;
  StreamingDetokenizer detokenizer;
  StopMatcher stop_matcher;
  RiskAccumulator risk;

  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_token;
  bool has_first_token = false;
};

}  // namespace witcert
