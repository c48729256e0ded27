// Pre-tokenizer: splits text into the pieces that BPE merges may not cross.
//
// Each supported tokenizer.ggml.pre value is a short list of regex stages (PCRE2 in UTF-8 +
// Unicode-property mode, JIT-compiled when available). Stage k is applied to every piece
// produced by stage k-1, separately, so its lookaheads see the end of that piece as the end
// of the text (this is how SmolLM's "split digits first" stage composes with the GPT-2
// pattern). Within a piece, regex matches are taken left to right; any text between two
// matches is kept as its own piece, so concatenating the pieces always gives back the input.
// Invalid UTF-8 is never handed to PCRE2: the input is cut into maximal valid runs (split by
// the stages) and invalid bytes (one piece per byte).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace witcert {

class Pcre2Regex;

class PreTokenizer {
 public:
  // `name` is tokenizer.ggml.pre. InvalidArgument for an unknown name (lists supported ones).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(std::string_view name);
  static std::vector<std::string> SupportedNames();

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Pieces are views into `text`; their concatenation is `text`. Thread-safe.
  std::vector<std::string_view> Split(std::string_view text) const;

  const std::string& name() const { return name_; }

 private:
  PreTokenizer() = default;
  void SplitValid(std::string_view text, std::vector<std::string_view>& out) const;

  std::string name_;
  std::vector<std::unique_ptr<Pcre2Regex>> stages_;
};

}  // namespace witcert
