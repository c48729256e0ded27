// The tokenizer interface, and its GGUF constructor: byte-level BPE (tokenizer.ggml.model
// "gpt2") or SentencePiece-style BPE ("llama"), both built by engine/tokenizer/bpe_tokenizer.h.
//
// Encoding: special tokens (control / user-defined types) are matched first when asked;
// byte-level text is split by the pre-tokenizer regex chosen from tokenizer.ggml.pre (PCRE2,
// UTF-8 + Unicode properties), each piece mapped to GPT-2 byte-level symbols and merged by BPE
// rank; SentencePiece text has its spaces written as "▁" and is merged by score. Decoding maps
// tokens back to bytes; see StreamingDetokenizer for UTF-8-safe streaming.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"

namespace witcert {

using TokenId = int32_t;

class Tokenizer {
 public:
  // InvalidArgument for an unsupported tokenizer.ggml.model or an unknown
  // tokenizer.ggml.pre (the message names it).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  virtual ~Tokenizer() = default;

  // `parse_special`: text like "<|im_start|>" becomes its special token id instead of being
  // tokenized as plain text. Chat prompts rendered from a template use true; raw user text
  // false. `add_bos` prepends BOS only when the model asks for it (tokenizer.ggml.add_bos_token).
  virtual std::vector<TokenId> Encode(std::string_view text, bool parse_special,
                                      bool add_bos = false) const = 0;
  // The raw bytes of one token (special tokens: their text, when `render_special`).
  virtual std::string TokenBytes(TokenId id, bool render_special = false) const = 0;
  // Concatenated bytes of `ids`; may end in an incomplete UTF-8 sequence.
  virtual std::string Decode(const std::vector<TokenId>& ids, bool render_special = false) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;   // -1 when the model has none
  virtual TokenId eos_id() const = 0;
  // End-of-generation: EOS, EOT (<|im_end|>, <|eot_id|>, <|endoftext|>) and similar.
  virtual bool IsEndOfGeneration(TokenId id) const = 0;
  virtual bool IsSpecial(TokenId id) const = 0;
  // Id of a token given its exact text, or -1.
  virtual TokenId Find(std::string_view token_text) const = 0;
  virtual std::string_view pre_tokenizer() const = 0;  // tokenizer.ggml.pre
};

// Turns a stream of token ids into text without ever emitting half of a multi-byte UTF-8
// character: bytes of an incomplete sequence are held until the sequence completes. Invalid
// bytes (a sequence that can never complete) are emitted as U+FFFD.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // Returns the text that became complete with `id` (possibly empty). Special tokens are
  // not rendered.
  std::string Push(TokenId id);
  // Returns whatever is still held (invalid tail → U+FFFD) and resets.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

// Length of the longest prefix of `bytes` that is complete, valid UTF-8.
size_t CompleteUtf8Prefix(std::string_view bytes);
bool IsValidUtf8(std::string_view bytes);

}  // namespace witcert
