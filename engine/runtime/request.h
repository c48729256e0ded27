// A generation request as the engine sees it, and the stream of events it produces.
//
// The engine knows no HTTP or gRPC: front ends translate their wire formats into a Request,
// read events from the RequestStream, and call Cancel() when their client goes away.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/cert/records.h"
#include "engine/gate/gate_policy.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/sampling_params.h"

namespace witcert {

// The most entries a request's lists may hold, whichever front end it came through: a list
// is work on every step (stop strings matched, choices masked), so one request must not be able
// to slow the engine for all. Engine::Submit rejects more; the HTTP parser answers 400 first.
inline constexpr size_t kMaxStopStrings = 4;  // OpenAI's limit
inline constexpr size_t kMaxStopTokenIds = 64;
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr size_t kMaxGuidedChoices = 64;
inline constexpr size_t kMaxGuidedChoiceBytes = 1024;

struct Request {
  std::string id;
  std::vector<int32_t> prompt;  // token ids, already templated
  SamplingParams sampling;
  StopCondition stop;
  // Per-request gate tightening; fields looser than the policy in force are ignored.
  std::optional<GatePolicy> gate;
  bool emit_cells = false;  // stream per-(layer, head, step) certificate cells
};

// The policy `request` runs under when `base` is in force: base tightened by the request's gate.
inline GatePolicy RequestPolicy(const GatePolicy& base, const Request& request) {
  return request.gate ? Tighten(base, *request.gate) : base;
}

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason reason);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

struct RequestEvent {
  enum class Kind { kToken, kCells, kFinish };
  Kind kind = Kind::kToken;
  // kToken: the sampled token and the text it completed (may be empty while a UTF-8
  // character or a possible stop string is still pending).
  SampledToken token;
  std::string text;
  // kCells: the certificate cells of one decode step.
  std::vector<CellRecord> cells;
  // kFinish
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status status;  // non-OK with kError
  Usage usage;
  RiskSummary risk;
  double time_to_first_token_s = 0.0;
  double total_time_s = 0.0;
};

// Single producer (the engine loop), single consumer (the front end). Thread-safe.
class RequestStream {
 public:
  explicit RequestStream(std::string id) : id_(std::move(id)) {}
  const std::string& id() const { return id_; }

  void Push(RequestEvent event);
  // Blocks until an event is available or `timeout_ms` passes (→ nullopt).
  std::optional<RequestEvent> Next(int64_t timeout_ms = -1);
  // Asks the engine to stop the request and free its KV blocks; idempotent.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::string id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace witcert
