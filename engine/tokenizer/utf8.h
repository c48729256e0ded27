// UTF-8 decoding helpers shared by the pre-tokenizer, the byte-level mapping and the
// streaming detokenizer.
//
// Validity follows Unicode Table 3-7 exactly: overlong forms, surrogates (U+D800..U+DFFF)
// and code points above U+10FFFF are invalid. An invalid sequence is reported with the
// length of its "maximal subpart" (the W3C/Unicode recommended practice), so replacing each
// invalid report with one U+FFFD gives the same output as browsers and Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace witcert {

enum class Utf8Status {
  kValid,       // a complete, valid sequence of `length` bytes
  kIncomplete,  // the input ends inside a sequence that could still become valid
  kInvalid,     // `length` bytes (>= 1) that can never be part of a valid sequence
};

struct Utf8Decoded {
  Utf8Status status = Utf8Status::kInvalid;
  size_t length = 0;
  char32_t code_point = 0;  // when kValid
};

// Decodes the sequence starting at `bytes[pos]`; `pos < bytes.size()`.
Utf8Decoded DecodeUtf8At(std::string_view bytes, size_t pos);

// Appends the UTF-8 encoding of `cp` (which must be a valid scalar value).
void AppendUtf8(char32_t cp, std::string& out);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Copies `bytes` to `out` replacing every invalid subpart with U+FFFD. With
// `hold_incomplete_tail`, a trailing incomplete sequence is not consumed; the return value is
// the number of bytes consumed (== bytes.size() without it: the tail becomes U+FFFD).
size_t AppendSanitizedUtf8(std::string_view bytes, bool hold_incomplete_tail, std::string& out);

}  // namespace witcert
