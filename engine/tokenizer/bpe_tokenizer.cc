// Byte-level BPE over a BpeVocab.
//
// Everything the hot path needs is precomputed at build: the id of every token text, the
// decoded bytes of every token, the pair → merge table and two special-token matchers
// (user-defined tokens are always matched, as HF "added tokens" and llama.cpp do; control
// tokens only with parse_special). Merge results are cached per piece in a bounded map
// because natural text repeats the same words constantly.
#include "engine/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "engine/common/status.h"
#include "engine/tokenizer/absl_bridge.h"
#include "engine/tokenizer/bpe_merger.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/special_tokens.h"
#include "engine/tokenizer/utf8.h"

namespace witcert {
namespace {

using Kind = TokenKind;

constexpr size_t kCacheMaxEntries = 1 << 16;
constexpr std::string_view kSpaceMark = kSentencePieceSpace;
constexpr size_t kCacheMaxPieceBytes = 64;

class BpeTokenizer final : public Tokenizer {
 public:
  std::vector<TokenId> Encode(std::string_view text, bool parse_special,
                              bool add_bos) const override {
    std::vector<TokenId> ids;
    ids.reserve(text.size() / 3 + 2);
    if (add_bos && add_bos_ && bos_ >= 0) ids.push_back(bos_);
    const SpecialTokenMatcher& matcher = parse_special ? all_special_ : user_defined_;
    if (matcher.empty()) {
      EncodePlain(text, /*starts_input=*/true, ids);
      return ids;
    }
    for (const TextSegment& seg : matcher.Split(text)) {
      if (seg.token >= 0) {
        ids.push_back(seg.token);
      } else {
        EncodePlain(seg.text, seg.text.data() == text.data(), ids);
      }
    }
    return ids;
  }

  std::string TokenBytes(TokenId id, bool render_special) const override {
    return Visible(id, render_special) ? bytes_[id] : std::string();
  }

  std::string Decode(const std::vector<TokenId>& ids, bool render_special) const override {
    std::string out;
    for (TokenId id : ids) {
      if (Visible(id, render_special)) out.append(bytes_[id]);
    }
    return out;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(bytes_.size()); }
  TokenId bos_id() const override { return bos_; }
  TokenId eos_id() const override { return eos_; }
  bool IsEndOfGeneration(TokenId id) const override {
    return InVocab(id) && end_of_generation_[id];
  }
  bool IsSpecial(TokenId id) const override {
    return InVocab(id) && (kinds_[id] == Kind::kControl || kinds_[id] == Kind::kUserDefined);
  }
  TokenId Find(std::string_view token_text) const override {
    auto it = ids_.find(Av(token_text));
    if (it != ids_.end()) return it->second;
    auto added = added_ids_.find(Av(token_text));
    return added == added_ids_.end() ? -1 : added->second;
  }
  std::string_view pre_tokenizer() const override { return pre_name_; }

 private:
  friend absl::StatusOr<std::unique_ptr<Tokenizer>> witcert::MakeBpeTokenizer(
      BpeVocab);

  bool InVocab(TokenId id) const { return id >= 0 && id < vocab_size(); }
  bool Visible(TokenId id, bool render_special) const {
    return InVocab(id) && (render_special || !hidden_[id]);
  }

  void EncodePlain(std::string_view text, bool starts_input, std::vector<TokenId>& ids) const {
    if (symbols_ == BpeSymbols::kByteLevel) {
      for (std::string_view piece : pre_->Split(text)) EncodePiece(piece, ids);
      return;
    }
    if (text.empty()) return;
    std::string spaced;  // the segment with spaces written as ▁, after its prefix
    spaced.reserve(text.size() + 8);
    if ((space_prefix_ == SpacePrefix::kEverySegment ||
         (space_prefix_ == SpacePrefix::kFirstSegment && starts_input)) &&
        !(prefix_unless_leading_space_ && text.front() == ' ')) {
      spaced += kSpaceMark;
    }
    for (char c : text) {
      if (c == ' ') spaced += kSpaceMark;
      else spaced.push_back(c);
    }
    if (!split_at_spaces_) {
      EncodePiece(spaced, ids);
      return;
    }
    const std::string_view all = spaced;
    size_t start = 0;
    for (size_t at = all.find(kSpaceMark, 1); at != std::string_view::npos; at = all.find(kSpaceMark, at + 1)) {
      if (at > start) EncodePiece(all.substr(start, at - start), ids);
      start = at;
    }
    EncodePiece(all.substr(start), ids);
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
    if (ignore_merges_) {  // a piece that is a whole token is that token
      auto it = ids_.find(symbols_ == BpeSymbols::kByteLevel ? ByteLevelAlphabet::Get().Encode(piece)
                                                             : std::string(piece));
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

  std::vector<std::string> bytes_;       // [vocab] decoded bytes (special: their text)
  std::vector<Kind> kinds_;              // [vocab] after added tokens
  std::vector<bool> hidden_;             // [vocab] rendered only with render_special
  std::vector<bool> end_of_generation_;  // [vocab]
  absl::flat_hash_map<std::string, TokenId> ids_;        // vocabulary text → lowest id
  absl::flat_hash_map<std::string, TokenId> added_ids_;  // added content → last id
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<BpeMerger> merger_;
  SpecialTokenMatcher user_defined_;  // matched always
  SpecialTokenMatcher all_special_;   // control + user-defined: matched with parse_special
  std::string pre_name_;
  BpeSymbols symbols_ = BpeSymbols::kByteLevel;
  SpacePrefix space_prefix_ = SpacePrefix::kNone;
  bool prefix_unless_leading_space_ = false;
  bool split_at_spaces_ = false;
  TokenId bos_ = -1;
  TokenId eos_ = -1;
  bool add_bos_ = false;
  bool ignore_merges_ = false;

  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<TokenId>> cache_
      ABSL_GUARDED_BY(cache_mu_);
};

// SentencePiece merges from scores: every split of a normal token into two normal tokens is a
// merge producing it, ranked by its score (higher first; equal scores share a rank, so the
// leftmost of such pairs merges first).
std::vector<BpeMergeRule> MergesFromScores(const std::vector<std::string>& texts,
                                           const std::vector<TokenKind>& kinds,
                                           const std::vector<float>& scores,
                                           const absl::flat_hash_map<std::string, TokenId>& ids) {
  std::vector<float> distinct;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (kinds[i] == TokenKind::kNormal) distinct.push_back(scores[i]);
  }
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const auto normal = [&](std::string_view text) -> TokenId {
    auto it = ids.find(Av(text));
    return it != ids.end() && kinds[it->second] == TokenKind::kNormal ? it->second : -1;
  };
  std::vector<BpeMergeRule> rules;
  for (size_t id = 0; id < texts.size(); ++id) {
    const std::string& t = texts[id];
    if (kinds[id] != TokenKind::kNormal || t.size() < 2) continue;
    const int32_t rank = static_cast<int32_t>(
        std::lower_bound(distinct.begin(), distinct.end(), scores[id], std::greater<float>()) -
        distinct.begin());
    for (size_t k = DecodeUtf8At(t, 0).length; k > 0 && k < t.size();) {
      const TokenId left = normal(std::string_view(t).substr(0, k));
      const TokenId right = normal(std::string_view(t).substr(k));
      if (left >= 0 && right >= 0) rules.push_back({left, right, static_cast<int32_t>(id), rank});
      const Utf8Decoded d = DecodeUtf8At(t, k);
      k += d.status == Utf8Status::kValid ? d.length : 1;
    }
  }
  // Lowest rank first, so a pair reachable from two tokens keeps the better one.
  std::stable_sort(rules.begin(), rules.end(),
                   [](const BpeMergeRule& a, const BpeMergeRule& b) { return a.rank < b.rank; });
  return rules;
}

// An id of the vocabulary, or -1 (none) when `optional`.
absl::Status CheckId(TokenId id, int32_t n, std::string_view what, bool optional = true) {
  if ((optional && id == -1) || (id >= 0 && id < n)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(Av(what), " ", id, " is outside the vocabulary [0, ", n, ")"));
}

}  // namespace

int ByteTokenValue(std::string_view text) {
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

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(BpeVocab vocab) {
  if (vocab.texts.empty() || vocab.texts.size() != vocab.kinds.size() ||
      (!vocab.scores.empty() && vocab.scores.size() != vocab.texts.size()) ||
      vocab.texts.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("byte-level BPE vocabulary has ",
                                                   vocab.texts.size(), " texts and ",
                                                   vocab.kinds.size(), " kinds"));
  }
  const int32_t n = static_cast<int32_t>(vocab.texts.size());
  RETURN_IF_ERROR(CheckId(vocab.bos, n, "bos id"));
  RETURN_IF_ERROR(CheckId(vocab.eos, n, "eos id"));
  RETURN_IF_ERROR(CheckId(vocab.unknown, n, "unknown id"));
  for (TokenId id : vocab.extra_end_of_generation) {
    RETURN_IF_ERROR(CheckId(id, n, "end-of-generation id"));
  }
  for (const AddedToken& a : vocab.added) {
    RETURN_IF_ERROR(CheckId(a.id, n, absl::StrCat("added token '", a.content, "'"),
                            /*optional=*/false));
  }

  auto tok = std::make_unique<BpeTokenizer>();
  tok->pre_name_ = std::move(vocab.pre_tokenizer);
  tok->symbols_ = vocab.symbols;
  tok->space_prefix_ = vocab.space_prefix;
  tok->split_at_spaces_ = vocab.split_at_spaces;
  tok->prefix_unless_leading_space_ = vocab.prefix_unless_leading_space;
  if (vocab.symbols == BpeSymbols::kByteLevel) {
    ASSIGN_OR_RETURN(tok->pre_, PreTokenizer::Create(tok->pre_name_));
  }
  tok->bos_ = vocab.bos;
  tok->eos_ = vocab.eos;
  tok->add_bos_ = vocab.add_bos;
  tok->ignore_merges_ = vocab.ignore_merges;

  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
  tok->kinds_ = std::move(vocab.kinds);
  tok->bytes_.reserve(n);
  tok->hidden_.assign(n, true);
  tok->end_of_generation_.assign(n, false);
  tok->ids_.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    std::string& text = vocab.texts[i];
    const Kind kind = tok->kinds_[i];
    const int byte = kind == Kind::kByte ? ByteTokenValue(text) : -1;
    if (kind == Kind::kAbsent) {
      tok->bytes_.emplace_back();
    } else if (kind == Kind::kNormal && vocab.symbols == BpeSymbols::kByteLevel) {
      tok->bytes_.push_back(alphabet.Decode(text));
    } else if (kind == Kind::kNormal) {
      tok->bytes_.push_back(absl::StrReplaceAll(Av(text), {{Av(kSpaceMark), " "}}));
    } else if (byte >= 0) {
      tok->bytes_.emplace_back(1, static_cast<char>(byte));
    } else {
      tok->bytes_.push_back(text);  // special and user-defined tokens render their text
    }
    tok->hidden_[i] = !(kind == Kind::kNormal || kind == Kind::kUserDefined || byte >= 0);
    if (kind == Kind::kUserDefined) tok->user_defined_.Add(text, i);
    if (kind == Kind::kUserDefined || kind == Kind::kControl) tok->all_special_.Add(text, i);
    if (kind != Kind::kAbsent) tok->ids_.try_emplace(text, i);  // texts stay: MergesFromScores
  }
  // The merger sees the vocabulary only: added tokens are matched whole, never merged into.
  const BpeAlphabet alphabet_kind =
      vocab.symbols == BpeSymbols::kByteLevel ? BpeAlphabet::kByteLevel : BpeAlphabet::kUtf8Chars;
  if (vocab.merges.empty() && !vocab.scores.empty()) {
    const std::vector<BpeMergeRule> rules =
        MergesFromScores(vocab.texts, tok->kinds_, vocab.scores, tok->ids_);
    tok->merger_ = std::make_unique<BpeMerger>(tok->ids_, absl::MakeConstSpan(rules), alphabet_kind,
                                               vocab.unknown);
  } else {
    std::vector<std::string_view> merges(vocab.merges.begin(), vocab.merges.end());
    tok->merger_ = std::make_unique<BpeMerger>(tok->ids_, absl::MakeConstSpan(merges), alphabet_kind,
                                               vocab.unknown);
  }

  for (AddedToken& a : vocab.added) {
    tok->kinds_[a.id] = a.special ? Kind::kControl : Kind::kUserDefined;
    tok->hidden_[a.id] = a.special;
    tok->bytes_[a.id] = a.content;  // added tokens render their literal text
    if (!a.special) tok->user_defined_.Add(a.content, a.id);
    tok->all_special_.Add(a.content, a.id);
    tok->added_ids_[std::move(a.content)] = a.id;
  }

  for (TokenId id : vocab.extra_end_of_generation) {
    if (id >= 0) tok->end_of_generation_[id] = true;
  }
  if (tok->eos_ >= 0) tok->end_of_generation_[tok->eos_] = true;
  for (std::string_view text :
       {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<|eom_id|>"}) {
    const TokenId id = tok->Find(text);
    if (id >= 0 && (!vocab.named_end_of_generation_special_only || tok->IsSpecial(id))) {
      tok->end_of_generation_[id] = true;
    }
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace witcert
