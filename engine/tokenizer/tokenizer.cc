// Tokenizer::FromGguf: parses a GGUF vocabulary (tokenizer.ggml.model == "gpt2") into a
// ByteLevelBpeVocab; byte_level_bpe.cc builds the tokenizer itself.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/tokenizer/absl_bridge.h"
#include "engine/tokenizer/byte_level_bpe.h"
#include "engine/tokenizer/tokenizer.h"

namespace witcert {
namespace {

// Optional token-id key: -1 when absent; InvalidArgument when present but out of range.
absl::StatusOr<TokenId> OptionalTokenId(const GgufFile& gguf, std::string_view key,
                                        int32_t vocab_size) {
  if (gguf.Find(key) == nullptr) return -1;
  ASSIGN_OR_RETURN(int64_t id, gguf.GetInt(key));
  if (id < 0 || id >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(key), " = ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
  }
  return static_cast<TokenId>(id);
}

// tokenizer.ggml.token_type → kind; a code GGUF does not define behaves as unused (its text
// is rendered only with render_special and it is never matched).
ByteLevelTokenKind KindOf(int type) {
  switch (type) {
    case 1: return ByteLevelTokenKind::kNormal;
    case 2: return ByteLevelTokenKind::kUnknown;
    case 3: return ByteLevelTokenKind::kControl;
    case 4: return ByteLevelTokenKind::kUserDefined;
    case 6: return ByteLevelTokenKind::kByte;
    default: return ByteLevelTokenKind::kUnused;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  if (gguf.Find("tokenizer.ggml.model") == nullptr) {
    return absl::InvalidArgumentError("tokenizer.ggml.model is missing");
  }
  ASSIGN_OR_RETURN(std::string_view model, gguf.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported tokenizer.ggml.model \"", Av(model), "\" (only \"gpt2\" byte-level BPE)"));
  }
  ByteLevelBpeVocab vocab;
  vocab.pre_tokenizer = "default";
  if (gguf.Find("tokenizer.ggml.pre") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view pre, gguf.GetString("tokenizer.ggml.pre"));
    vocab.pre_tokenizer = std::string(pre);
  }
  vocab.ignore_merges = vocab.pre_tokenizer == "llama-bpe";

  if (gguf.Find("tokenizer.ggml.tokens") == nullptr) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens is missing");
  }
  ASSIGN_OR_RETURN(auto tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens is empty or too large");
  }
  const int32_t n = static_cast<int32_t>(tokens.size());
  vocab.texts.assign(tokens.begin(), tokens.end());
  vocab.kinds.assign(n, ByteLevelTokenKind::kNormal);
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(auto types, gguf.GetNumberArray("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type has ",
                                                     types.size(), " entries for ", n, " tokens"));
    }
    for (int32_t i = 0; i < n; ++i) vocab.kinds[i] = KindOf(static_cast<int>(types[i]));
  }
  if (gguf.Find("tokenizer.ggml.merges") == nullptr) {
    return absl::InvalidArgumentError("tokenizer.ggml.merges is missing");
  }
  ASSIGN_OR_RETURN(auto merges, gguf.GetStringArray("tokenizer.ggml.merges"));
  vocab.merges.assign(merges.begin(), merges.end());

  ASSIGN_OR_RETURN(vocab.bos, OptionalTokenId(gguf, "tokenizer.ggml.bos_token_id", n));
  ASSIGN_OR_RETURN(vocab.eos, OptionalTokenId(gguf, "tokenizer.ggml.eos_token_id", n));
  ASSIGN_OR_RETURN(TokenId eot, OptionalTokenId(gguf, "tokenizer.ggml.eot_token_id", n));
  ASSIGN_OR_RETURN(TokenId eom, OptionalTokenId(gguf, "tokenizer.ggml.eom_token_id", n));
  ASSIGN_OR_RETURN(vocab.unknown, OptionalTokenId(gguf, "tokenizer.ggml.unknown_token_id", n));
  ASSIGN_OR_RETURN(TokenId pad, OptionalTokenId(gguf, "tokenizer.ggml.padding_token_id", n));
  (void)pad;  // validated only: padding never appears in encoded text
  vocab.extra_end_of_generation = {eot, eom};
  if (gguf.Find("tokenizer.ggml.add_bos_token") != nullptr) {
    ASSIGN_OR_RETURN(vocab.add_bos, gguf.GetBool("tokenizer.ggml.add_bos_token"));
  }
  return MakeByteLevelBpeTokenizer(std::move(vocab));
}

}  // namespace witcert
