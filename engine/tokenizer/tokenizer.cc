// Byte-level BPE tokenizer over a GGUF vocabulary (tokenizer.ggml.model == "gpt2").
//
// Everything the hot path needs is precomputed at load: the id of every token text, the
// decoded bytes of every token, the pair → merge table and two special-token matchers
// (user-defined tokens are always matched, as HF "added tokens" and llama.cpp do; control
// tokens only with parse_special). Merge results are cached per piece in a bounded map
// because natural text repeats the same words constantly.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/tokenizer/absl_bridge.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/common/status.h"
#include "engine/tokenizer/bpe_merger.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/special_tokens.h"
#include "engine/tokenizer/tokenizer.h"

namespace witcert {
namespace {

// tokenizer.ggml.token_type values.
enum TokenType : int {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

constexpr size_t kCacheMaxEntries = 1 << 16;
constexpr size_t kCacheMaxPieceBytes = 64;

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

// "<0xNN>" → NN, else -1.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

class BpeTokenizer final : public Tokenizer {
 public:
  std::vector<TokenId> Encode(std::string_view text, bool parse_special,
                              bool add_bos) const override {
    std::vector<TokenId> ids;
    ids.reserve(text.size() / 3 + 2);
    if (add_bos && add_bos_ && bos_ >= 0) ids.push_back(bos_);
    const SpecialTokenMatcher& matcher = parse_special ? all_special_ : user_defined_;
    if (matcher.empty()) {
      EncodePlain(text, ids);
      return ids;
    }
    for (const TextSegment& seg : matcher.Split(text)) {
      if (seg.token >= 0) {
        ids.push_back(seg.token);
      } else {
        EncodePlain(seg.text, ids);
      }
    }
    return ids;
  }

  std::string TokenBytes(TokenId id, bool render_special) const override {
    if (id < 0 || id >= vocab_size()) return "";
    if (hidden_[id] && !render_special) return "";
    return bytes_[id];
  }

  std::string Decode(const std::vector<TokenId>& ids, bool render_special) const override {
    std::string out;
    for (TokenId id : ids) {
      if (id < 0 || id >= vocab_size() || (hidden_[id] && !render_special)) continue;
      out.append(bytes_[id]);
    }
    return out;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(texts_.size()); }
  TokenId bos_id() const override { return bos_; }
  TokenId eos_id() const override { return eos_; }
  bool IsEndOfGeneration(TokenId id) const override {
    return id >= 0 && id < vocab_size() && end_of_generation_[id];
  }
  bool IsSpecial(TokenId id) const override {
    return id >= 0 && id < vocab_size() &&
           (types_[id] == kControl || types_[id] == kUserDefined);
  }
  TokenId Find(std::string_view token_text) const override {
    auto it = ids_.find(Av(token_text));
    return it == ids_.end() ? -1 : it->second;
  }
  std::string_view pre_tokenizer() const override { return pre_name_; }

 private:
  friend absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile&);

  void EncodePlain(std::string_view text, std::vector<TokenId>& ids) const {
    for (std::string_view piece : pre_->Split(text)) EncodePiece(piece, ids);
  }

  void EncodePiece(std::string_view piece, std::vector<TokenId>& ids) const {
    const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
    if (cacheable) {
      absl::MutexLock lock(&cache_mu_);
      auto it = cache_.find(Av(piece));
      if (it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<TokenId> piece_ids;
    if (ignore_merges_) {  // Llama 3: a piece that is a whole token is that token
      auto it = ids_.find(ByteLevelAlphabet::Get().Encode(piece));
      if (it != ids_.end()) piece_ids.push_back(it->second);
    }
    if (piece_ids.empty()) merger_->Merge(piece, piece_ids);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    if (cacheable) {
      absl::MutexLock lock(&cache_mu_);
      if (cache_.size() >= kCacheMaxEntries) cache_.clear();
      cache_.emplace(std::string(piece), std::move(piece_ids));
    }
  }

  std::vector<std::string> texts_;           // [vocab] token text as stored (byte-level)
  std::vector<std::string> bytes_;           // [vocab] decoded bytes (special: their text)
  std::vector<int> types_;                   // [vocab] TokenType
  std::vector<bool> hidden_;                 // [vocab] rendered only with render_special
  std::vector<bool> end_of_generation_;      // [vocab]
  absl::flat_hash_map<std::string, TokenId> ids_;  // text → first id with that text
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<BpeMerger> merger_;
  SpecialTokenMatcher user_defined_;  // matched always
  SpecialTokenMatcher all_special_;   // control + user-defined: matched with parse_special
  std::string pre_name_;
  TokenId bos_ = -1;
  TokenId eos_ = -1;
  bool add_bos_ = false;
  bool ignore_merges_ = false;

  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<TokenId>> cache_
      ABSL_GUARDED_BY(cache_mu_);
};

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
  auto tok = std::make_unique<BpeTokenizer>();
  tok->pre_name_ = "default";
  if (gguf.Find("tokenizer.ggml.pre") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view pre, gguf.GetString("tokenizer.ggml.pre"));
    tok->pre_name_ = std::string(pre);
  }
  ASSIGN_OR_RETURN(tok->pre_, PreTokenizer::Create(tok->pre_name_));
  tok->ignore_merges_ = tok->pre_name_ == "llama-bpe";

  if (gguf.Find("tokenizer.ggml.tokens") == nullptr) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens is missing");
  }
  ASSIGN_OR_RETURN(auto tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer.ggml.tokens is empty or too large");
  }
  const int32_t n = static_cast<int32_t>(tokens.size());
  tok->types_.assign(n, kNormal);
  if (gguf.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(auto types, gguf.GetNumberArray("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type has ",
                                                     types.size(), " entries for ", n, " tokens"));
    }
    for (int32_t i = 0; i < n; ++i) tok->types_[i] = static_cast<int>(types[i]);
  }
  if (gguf.Find("tokenizer.ggml.merges") == nullptr) {
    return absl::InvalidArgumentError("tokenizer.ggml.merges is missing");
  }
  ASSIGN_OR_RETURN(auto merges, gguf.GetStringArray("tokenizer.ggml.merges"));

  ASSIGN_OR_RETURN(tok->bos_, OptionalTokenId(gguf, "tokenizer.ggml.bos_token_id", n));
  ASSIGN_OR_RETURN(tok->eos_, OptionalTokenId(gguf, "tokenizer.ggml.eos_token_id", n));
  ASSIGN_OR_RETURN(TokenId eot, OptionalTokenId(gguf, "tokenizer.ggml.eot_token_id", n));
  ASSIGN_OR_RETURN(TokenId eom, OptionalTokenId(gguf, "tokenizer.ggml.eom_token_id", n));
  ASSIGN_OR_RETURN(TokenId unk, OptionalTokenId(gguf, "tokenizer.ggml.unknown_token_id", n));
  ASSIGN_OR_RETURN(TokenId pad, OptionalTokenId(gguf, "tokenizer.ggml.padding_token_id", n));
  (void)pad;  // validated only: padding never appears in encoded text
  if (gguf.Find("tokenizer.ggml.add_bos_token") != nullptr) {
    ASSIGN_OR_RETURN(tok->add_bos_, gguf.GetBool("tokenizer.ggml.add_bos_token"));
  }

  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
  tok->texts_.reserve(n);
  tok->bytes_.reserve(n);
  tok->hidden_.assign(n, false);
  tok->end_of_generation_.assign(n, false);
  tok->ids_.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const std::string_view text = tokens[i];
    tok->texts_.emplace_back(text);
    tok->ids_.try_emplace(std::string(text), i);
    const int type = tok->types_[i];
    if (type == kNormal) {
      tok->bytes_.push_back(alphabet.Decode(text));
    } else if (type == kByte && ParseByteToken(text) >= 0) {
      tok->bytes_.emplace_back(1, static_cast<char>(ParseByteToken(text)));
    } else {
      tok->bytes_.emplace_back(text);  // special and user-defined tokens render their text
      tok->hidden_[i] = type != kUserDefined;
    }
    if (type == kUserDefined) tok->user_defined_.Add(text, i);
    if (type == kUserDefined || type == kControl) tok->all_special_.Add(text, i);
  }
  for (TokenId id : {tok->eos_, eot, eom}) {
    if (id >= 0) tok->end_of_generation_[id] = true;
  }
  for (std::string_view text :
       {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<|eom_id|>"}) {
    const TokenId id = tok->Find(text);
    if (id >= 0) tok->end_of_generation_[id] = true;
  }
  tok->merger_ = std::make_unique<BpeMerger>(tok->ids_, merges, unk);
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace witcert
