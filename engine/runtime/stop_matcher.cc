#include "engine/runtime/stop_matcher.h"

#include <utility>

#include <algorithm>

namespace witcert {

std::string StopMatcher::Push(const std::string& text, bool* stopped) {
  *stopped = false;
  held_ += text;
  if (stops_.empty()) return std::exchange(held_, {});
  size_t first_match = std::string::npos;
  for (const std::string& stop : stops_) {
    if (stop.empty()) continue;
    const size_t at = held_.find(stop);
    if (at != std::string::npos) first_match = std::min(first_match, at);
  }
  if (first_match != std::string::npos) {
    *stopped = true;
    std::string out = held_.substr(0, first_match);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - (stop.empty() ? 0 : 1), held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() { return std::exchange(held_, {}); }

}  // namespace witcert
