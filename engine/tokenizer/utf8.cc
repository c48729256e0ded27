#include "engine/tokenizer/utf8.h"

#include "engine/tokenizer/tokenizer.h"

namespace witcert {
namespace {

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

Utf8Decoded DecodeUtf8At(std::string_view bytes, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(bytes[pos + i]); };
  const size_t avail = bytes.size() - pos;
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) return {Utf8Status::kValid, 1, b0};

  size_t need;       // total sequence length
  uint8_t lo = 0x80;  // allowed range of the second byte (Table 3-7)
  uint8_t hi = 0xBF;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // > U+10FFFF
  } else {
    return {Utf8Status::kInvalid, 1, 0};  // continuation byte, C0/C1, F5..FF
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= avail) return {Utf8Status::kIncomplete, avail, 0};
    const uint8_t b = byte(i);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : IsContinuation(b);
    if (!ok) return {Utf8Status::kInvalid, i, 0};  // maximal subpart: the bytes before it
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Status::kValid, need, cp};
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendSanitizedUtf8(std::string_view bytes, bool hold_incomplete_tail, std::string& out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Decoded d = DecodeUtf8At(bytes, pos);
    switch (d.status) {
      case Utf8Status::kValid:
        out.append(bytes.substr(pos, d.length));
        break;
      case Utf8Status::kInvalid:
        out.append(kReplacementChar);
        break;
      case Utf8Status::kIncomplete:
        if (hold_incomplete_tail) return pos;
        out.append(kReplacementChar);
        break;
    }
    pos += d.length;
  }
  return pos;
}

size_t CompleteUtf8Prefix(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Decoded d = DecodeUtf8At(bytes, pos);
    if (d.status != Utf8Status::kValid) break;
    pos += d.length;
  }
  return pos;
}

bool IsValidUtf8(std::string_view bytes) { return CompleteUtf8Prefix(bytes) == bytes.size(); }

}  // namespace witcert
