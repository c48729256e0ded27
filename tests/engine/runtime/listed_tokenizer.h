// A tokenizer that is just a list of token texts, the last one an end-of-generation special
// token: what the output-constraint tests (JSON mode, guided choice) need from a vocabulary.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace witcert::testing {

class ListedTokenizer : public Tokenizer {
 public:
  // `texts` are the normal tokens; "<eos>" is appended as the special end token.
  explicit ListedTokenizer(std::vector<std::string> texts) : texts_(std::move(texts)) {
    texts_.push_back("<eos>");
  }
  std::vector<TokenId> Encode(std::string_view, bool, bool) const override { return {}; }
  std::string TokenBytes(TokenId id, bool render_special) const override {
    return IsSpecial(id) && !render_special ? "" : texts_[id];
  }
  std::string Decode(const std::vector<TokenId>&, bool) const override { return ""; }
  int32_t vocab_size() const override { return static_cast<int32_t>(texts_.size()); }
  TokenId bos_id() const override { return -1; }
  TokenId eos_id() const override { return vocab_size() - 1; }
  bool IsEndOfGeneration(TokenId id) const override { return id == eos_id(); }
  bool IsSpecial(TokenId id) const override { return id == eos_id(); }
  TokenId Find(std::string_view) const override { return -1; }
  std::string_view pre_tokenizer() const override { return "listed"; }

 private:
  std::vector<std::string> texts_;
};

}  // namespace witcert::testing
