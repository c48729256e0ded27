#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace witcert {

std::string StreamingDetokenizer::Push(TokenId id) {
  pending_ += tokenizer_.TokenBytes(id, /*render_special=*/false);
  std::string out;
  const size_t consumed = AppendSanitizedUtf8(pending_, /*hold_incomplete_tail=*/true, out);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out;
  AppendSanitizedUtf8(pending_, /*hold_incomplete_tail=*/false, out);
  pending_.clear();
  return out;
}

}  // namespace witcert
