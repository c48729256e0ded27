// Finds special-token texts (e.g. "<|im_start|>") inside raw text so they become single ids
// instead of being spelled out by BPE.
//
// Matching scans left to right and, at each position, tries the candidate tokens that start
// with that byte from longest to shortest: the leftmost match wins, and among matches at the
// same position the longest (so "<|im_start|>" beats a hypothetical "<|im").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace witcert {

struct TextSegment {
  std::string_view text;  // view into the input
  int32_t token = -1;     // the special token's id, or -1 for plain text
};

class SpecialTokenMatcher {
 public:
  // Empty texts are ignored.
  void Add(std::string_view text, int32_t id);
  bool empty() const { return count_ == 0; }

  // Consecutive segments covering `text` exactly; plain segments are never empty.
  std::vector<TextSegment> Split(std::string_view text) const;

 private:
  struct Entry {
    std::string text;
    int32_t id;
  };
  std::array<std::vector<Entry>, 256> by_first_byte_;  // each sorted by length, longest first
  size_t count_ = 0;
};

}  // namespace witcert
