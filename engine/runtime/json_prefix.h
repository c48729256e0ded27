// JSON mode (OpenAI response_format {"type": "json_object"}): which next tokens keep the output a
// prefix of one JSON object.
//
// JsonPrefix is a byte-level recognizer of RFC 8259 JSON restricted to a top-level object:
// Feed(c) accepts c when the bytes so far followed by c can still be completed to a valid
// document, so a token is allowed when all its bytes are accepted. The state is a small,
// trivially copyable value (a bracket stack of kMaxDepth, the lexical mode), so testing every
// token of a vocabulary from the current state costs copies of it, not allocations. Strings
// accept any byte ≥ 0x20 other than '"' and '\' (UTF-8 is the tokenizer's business), escapes
// are the eight single-character ones and \u with four hex digits; numbers follow the grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, ended by the next structural byte or space.
// Nesting deeper than kMaxDepth is refused rather than tracked.
//
// JsonTokenMask applies it to a tokenizer's TokenByteTable: the tokens allowed from a state.
// Once the object is closed only end-of-generation tokens are allowed; tokens without bytes
// (special tokens) never are before that.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/token_bytes.h"

namespace witcert {

class JsonPrefix {
 public:
  static constexpr int kMaxDepth = 32;

  // Accepts `c` when the output so far plus c is still a viable prefix; otherwise returns false
  // and leaves the state as it was.
  bool Feed(char c);
  bool Feed(std::string_view bytes);  // all or nothing: on false the state is unchanged
  // The top-level object has been closed (only whitespace may follow).
  bool Complete() const { return mode_ == Mode::kDone; }
  // Everything that decides what may follow, as bytes: equal keys accept the same bytes.
  std::string Key() const;

 private:
  enum class Mode : uint8_t {
    kStart,         // before the top-level '{'
    kKeyOrClose,    // after '{': a key or '}'
    kKey,           // after ',' in an object: a key
    kColon,         // after a key
    kValueOrClose,  // after '[': a value or ']'
    kValue,         // after ':' or ',' in an array
    kCommaOrClose,  // after a value inside a container
    kString,        // inside a string (key_ says which)
    kEscape,        // after '\' in a string
    kUnicode,       // inside \uXXXX; count_ hex digits read
    kNumber,        // inside a number; number_ is its sub-state
    kLiteral,       // inside true / false / null; literal_ and count_
    kDone,          // the top-level object is closed
  };
  enum class NumberState : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpInt };

  bool FeedOne(char c);
  bool StartValue(char c);   // c begins a value (mode_ expects one)
  bool AfterValue();         // a value just ended: back to the container, or done
  bool CloseContainer(char c);
  bool NumberMayEnd() const;

  Mode mode_ = Mode::kStart;
  NumberState number_ = NumberState::kInt;
  bool key_ = false;          // kString: the string is an object key
  uint8_t literal_ = 0;       // kLiteral: 0 true, 1 false, 2 null
  uint8_t count_ = 0;         // kLiteral: bytes matched; kUnicode: hex digits read
  uint8_t depth_ = 0;
  std::array<char, kMaxDepth> stack_{};  // '{' or '[' per open container
};

class JsonTokenMask {
 public:
  explicit JsonTokenMask(const TokenByteTable& tokens) : tokens_(tokens) {}

  // allowed [vocab]: 1 for each token the state accepts (end-of-generation tokens once the
  // object is complete, and only then). Masks are cached by JsonPrefix::Key (a state inside a
  // string looks the same whatever the string holds, so most steps hit); thread-safe.
  void Allowed(const JsonPrefix& state, std::vector<uint8_t>* allowed) const;
  int64_t cache_hits() const;
  // Advances `state` by `token`'s bytes (a token Allowed permitted).
  void Advance(int32_t token, JsonPrefix* state) const;

 private:
  static constexpr size_t kCacheEntries = 64;  // masks kept (vocab bytes each)

  const TokenByteTable& tokens_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::vector<uint8_t>> cache_ ABSL_GUARDED_BY(mu_);
  mutable int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace witcert
