#include "engine/tokenizer/special_tokens.h"

#include <algorithm>

namespace witcert {

void SpecialTokenMatcher::Add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  auto& bucket = by_first_byte_[static_cast<uint8_t>(text[0])];
  bucket.push_back({std::string(text), id});
  std::stable_sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) {
    return a.text.size() > b.text.size();
  });
  ++count_;
}

std::vector<TextSegment> SpecialTokenMatcher::Split(std::string_view text) const {
  std::vector<TextSegment> out;
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const Entry* match = nullptr;
    for (const Entry& e : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      if (text.substr(pos, e.text.size()) == e.text) {
        match = &e;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    if (pos > plain_start) out.push_back({text.substr(plain_start, pos - plain_start), -1});
    out.push_back({text.substr(pos, match->text.size()), match->id});
    pos += match->text.size();
    plain_start = pos;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
  return out;
}

}  // namespace witcert
