#include "engine/runtime/request.h"

#include <chrono>

namespace witcert {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

void RequestStream::Push(RequestEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_one();
}

std::optional<RequestEvent> RequestStream::Next(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return !events_.empty(); };
  if (timeout_ms < 0) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
    return std::nullopt;
  }
  RequestEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

}  // namespace witcert
