// Every token's output bytes and whether it ends generation, computed once per tokenizer: what
// the output constraints (JSON mode, guided choice) test candidate tokens against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace witcert {

class TokenByteTable {
 public:
  explicit TokenByteTable(const Tokenizer& tokenizer) {
    const int32_t vocab = tokenizer.vocab_size();
    bytes_.resize(static_cast<size_t>(vocab));
    end_.assign(static_cast<size_t>(vocab), 0);
    for (int32_t id = 0; id < vocab; ++id) {
      end_[id] = tokenizer.IsEndOfGeneration(id) ? 1 : 0;
      if (!tokenizer.IsSpecial(id)) bytes_[id] = tokenizer.TokenBytes(id);
    }
  }

  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  // The token's bytes; "" for special tokens (which no constraint lets through as text).
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool is_end(int32_t id) const { return end_[id] != 0; }
  const std::vector<uint8_t>& end_flags() const { return end_; }  // [vocab]

 private:
  std::vector<std::string> bytes_;  // [vocab]
  std::vector<uint8_t> end_;        // [vocab] 1 for end-of-generation tokens
};

}  // namespace witcert
