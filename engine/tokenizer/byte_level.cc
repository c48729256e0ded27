#include "engine/tokenizer/byte_level.h"

#include "engine/tokenizer/utf8.h"

namespace witcert {
namespace {

bool MapsToItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

}  // namespace

const ByteLevelAlphabet& ByteLevelAlphabet::Get() {
  static const ByteLevelAlphabet* const alphabet = new ByteLevelAlphabet();
  return *alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  from_cp_.fill(-1);
  char32_t next_shifted = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = MapsToItself(b) ? static_cast<char32_t>(b) : next_shifted++;
    to_cp_[b] = cp;
    from_cp_[cp] = static_cast<int16_t>(b);
    AppendUtf8(cp, spelling_[b]);
  }
}

std::string ByteLevelAlphabet::Encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(spelling_[static_cast<uint8_t>(c)]);
  return out;
}

std::string ByteLevelAlphabet::Decode(std::string_view spelled) const {
  std::string out;
  out.reserve(spelled.size());
  size_t pos = 0;
  while (pos < spelled.size()) {
    const Utf8Decoded d = DecodeUtf8At(spelled, pos);
    const size_t len = d.status == Utf8Status::kValid ? d.length : 1;
    const int b = d.status == Utf8Status::kValid ? ToByte(d.code_point) : -1;
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(spelled.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

}  // namespace witcert
