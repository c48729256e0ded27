// Tokenizer::FromGguf: parses a GGUF vocabulary into a BpeVocab (tokenizer.ggml.model
// "gpt2": byte-level BPE with a merge list; "llama": SentencePiece-style BPE with scores, as
// llama.cpp's SPM tokenizer reads them); bpe_tokenizer.cc builds the tokenizer itself.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/tokenizer/absl_bridge.h"
#include "engine/tokenizer/bpe_tokenizer.h"
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
TokenKind KindOf(int type) {
  switch (type) {
    case 1: return TokenKind::kNormal;
    case 2: return TokenKind::kUnknown;
    case 3: return TokenKind::kControl;
    case 4: return TokenKind::kUserDefined;
    case 6: return TokenKind::kByte;
    default: return TokenKind::kUnused;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  if (gguf.Find("tokenizer.ggml.model") == nullptr) {
    return absl::InvalidArgumentError("tokenizer.ggml.model is missing");
  }
  ASSIGN_OR_RETURN(std::string_view model, gguf.GetString("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported tokenizer.ggml.model \"", Av(model),
        "\" (\"gpt2\" byte-level BPE and \"llama\" SentencePiece BPE are supported)"));
  }
  const bool sentencepiece = model == "llama";
  BpeVocab vocab;
  vocab.pre_tokenizer = "default";
  if (gguf.Find("tokenizer.ggml.pre") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view pre, gguf.GetString("tokenizer.ggml.pre"));
    vocab.pre_tokenizer = std::string(pre);
  }
  // As llama.cpp reads these vocabularies: a piece that is a whole token is that token; tekken
  // files prepend BOS unless they say otherwise.
  vocab.ignore_merges = vocab.pre_tokenizer == "llama-bpe" || vocab.pre_tokenizer == "tekken";
  if (vocab.pre_tokenizer == "tekken") vocab.add_bos = true;

  if (gguf.Find("tokenizer.ggml.tokens") == nullptr) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens is missing");
  }
  ASSIGN_OR_RETURN(auto tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens is empty or too large");
  }
  const int32_t n = static_cast<int32_t>(tokens.size());
  vocab.texts.assign(tokens.begin(), tokens.end());
  vocab.kinds.assign(n, TokenKind::kNormal);
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(auto types, gguf.GetNumberArray("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type has ",
                                                     types.size(), " entries for ", n, " tokens"));
    }
    for (int32_t i = 0; i < n; ++i) vocab.kinds[i] = KindOf(static_cast<int>(types[i]));
  }
  if (sentencepiece) {
    // No regex and no merge list: scores rank the merges; "▁" before every text segment
    // unless tokenizer.ggml.add_space_prefix says otherwise; BOS by default.
    vocab.symbols = BpeSymbols::kSentencePiece;
    vocab.ignore_merges = false;
    bool space_prefix = true;
    if (gguf.Find("tokenizer.ggml.add_space_prefix") != nullptr) {
      ASSIGN_OR_RETURN(space_prefix, gguf.GetBool("tokenizer.ggml.add_space_prefix"));
    }
    vocab.space_prefix = space_prefix ? SpacePrefix::kEverySegment : SpacePrefix::kNone;
    vocab.add_bos = true;
    if (gguf.Find("tokenizer.ggml.scores") == nullptr) {
      return absl::InvalidArgumentError("tokenizer.ggml.scores is missing (a \"llama\" vocabulary needs them)");
    }
    ASSIGN_OR_RETURN(auto scores, gguf.GetNumberArray("tokenizer.ggml.scores"));
    if (scores.size() != tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.scores has ", scores.size(),
                                                     " entries for ", n, " tokens"));
    }
    vocab.scores.assign(scores.begin(), scores.end());
  } else {
    if (gguf.Find("tokenizer.ggml.merges") == nullptr) {
      return absl::InvalidArgumentError("tokenizer.ggml.merges is missing");
    }
    ASSIGN_OR_RETURN(auto merges, gguf.GetStringArray("tokenizer.ggml.merges"));
    vocab.merges.assign(merges.begin(), merges.end());
  }

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
  return MakeBpeTokenizer(std::move(vocab));
}

}  // namespace witcert
