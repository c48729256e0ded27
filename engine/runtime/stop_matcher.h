// Finds stop strings in streamed text without ever emitting part of a stop string.
//
// Text is released only up to the longest suffix that could still grow into a stop string;
// once a stop string appears, everything before it is released and the match is dropped.
#pragma once

#include <string>
#include <vector>

namespace witcert {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends `text`; returns what may be emitted now. Sets `stopped` when a stop string
  // matched (the returned text then ends right before it).
  std::string Push(const std::string& text, bool* stopped);
  // Releases the held tail at the end of generation.
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace witcert
