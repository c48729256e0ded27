// GPT-2 byte-level alphabet: a bijection between the 256 byte values and 256 printable
// Unicode code points, so every byte string has a visible, whitespace-free spelling that a
// BPE vocabulary can store as text.
//
// Definition (bytes_to_unicode): bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF map to the code
// point of the same value; the remaining 68 bytes, taken in increasing order, map to
// U+0100, U+0101, ... (so ' ' (0x20) is U+0120 'Ġ' and '\n' (0x0A) is U+010A 'Ċ').
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace witcert {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& Get();

  char32_t ToCodePoint(uint8_t byte) const { return to_cp_[byte]; }
  // UTF-8 spelling of `byte`'s code point.
  std::string_view Spelling(uint8_t byte) const { return spelling_[byte]; }
  // The byte a code point stands for, or -1 when it is not in the alphabet.
  int ToByte(char32_t cp) const { return cp < from_cp_.size() ? from_cp_[cp] : -1; }

  // Byte-level spelling of raw bytes (what BPE merges operate on).
  std::string Encode(std::string_view bytes) const;
  // Inverse of Encode; code points outside the alphabet are copied through as UTF-8 and
  // invalid UTF-8 is copied byte for byte, so nothing is dropped.
  std::string Decode(std::string_view spelled) const;

 private:
  ByteLevelAlphabet();

  std::array<char32_t, 256> to_cp_{};
  std::array<std::string, 256> spelling_;
  std::array<int16_t, 512> from_cp_{};  // every alphabet code point is < U+0144
};

}  // namespace witcert
