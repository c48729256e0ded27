#include "engine/tokenizer/synthetic_tokenizer.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/special_tokens.h"

namespace witcert {
namespace {

constexpr int32_t kNumBytes = 256;
constexpr std::string_view kSpecialTexts[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
constexpr int32_t kNumSpecials = 3;

class SyntheticTokenizer final : public Tokenizer {
 public:
  explicit SyntheticTokenizer(int32_t vocab_size) : vocab_size_(vocab_size) {
    for (int32_t i = 0; i < kNumSpecials; ++i) {
      specials_.Add(kSpecialTexts[i], FirstSpecial() + i);
    }
  }

  std::vector<TokenId> Encode(std::string_view text, bool parse_special,
                              bool add_bos) const override {
    std::vector<TokenId> ids;
    ids.reserve(text.size());
    (void)add_bos;  // synthetic models do not ask for BOS
    auto bytes = [&ids](std::string_view s) {
      for (char c : s) ids.push_back(static_cast<uint8_t>(c));
    };
    if (!parse_special) {
      bytes(text);
      return ids;
    }
    for (const TextSegment& seg : specials_.Split(text)) {
      if (seg.token >= 0) {
        ids.push_back(seg.token);
      } else {
        bytes(seg.text);
      }
    }
    return ids;
  }

  std::string TokenBytes(TokenId id, bool render_special) const override {
    if (id < 0 || id >= vocab_size_) return "";
    if (id < kNumBytes) return std::string(1, static_cast<char>(id));
    if (id >= FirstSpecial()) {
      return render_special ? std::string(kSpecialTexts[id - FirstSpecial()]) : "";
    }
    return absl::StrCat("<t", id, ">");
  }

  std::string Decode(const std::vector<TokenId>& ids, bool render_special) const override {
    std::string out;
    for (TokenId id : ids) out += TokenBytes(id, render_special);
    return out;
  }

  int32_t vocab_size() const override { return vocab_size_; }
  TokenId bos_id() const override { return FirstSpecial(); }
  TokenId eos_id() const override { return vocab_size_ - 1; }
  bool IsEndOfGeneration(TokenId id) const override {
    return id == eos_id() || id == FirstSpecial();
  }
  bool IsSpecial(TokenId id) const override { return id >= FirstSpecial() && id < vocab_size_; }
  TokenId Find(std::string_view token_text) const override {
    for (int32_t i = 0; i < kNumSpecials; ++i) {
      if (token_text == kSpecialTexts[i]) return FirstSpecial() + i;
    }
    return -1;
  }
  std::string_view pre_tokenizer() const override { return "synthetic"; }

 private:
  TokenId FirstSpecial() const { return vocab_size_ - kNumSpecials; }

  int32_t vocab_size_;
  SpecialTokenMatcher specials_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeSyntheticTokenizer(int32_t vocab_size) {
  if (vocab_size < kNumBytes + kNumSpecials + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic tokenizer needs a vocabulary of at least ", kNumBytes + kNumSpecials + 1,
        " ids (256 bytes, 3 specials, one <tn>), got ", vocab_size));
  }
  return std::unique_ptr<Tokenizer>(new SyntheticTokenizer(vocab_size));
}

}  // namespace witcert
