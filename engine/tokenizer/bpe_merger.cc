#include "engine/tokenizer/bpe_merger.h"

#include <queue>

#include "absl/strings/str_format.h"
#include "engine/tokenizer/absl_bridge.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"

namespace witcert {
namespace {

struct Candidate {
  int32_t rank;
  int32_t left;  // symbol index of the pair's left half
  int32_t left_id;
  int32_t right_id;
};

struct CandidateAfter {  // min-heap order: lowest rank, then leftmost
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

struct Symbol {
  int32_t id;    // token id; negative: a byte or character without a token (never merges)
  int32_t prev;  // -1 at the start
  int32_t next;  // -1 at the end
};

}  // namespace

void BpeMerger::InitAlphabet(const absl::flat_hash_map<std::string, int32_t>& vocab) {
  const auto find = [&](std::string_view text) -> int32_t {
    auto it = vocab.find(Av(text));
    return it == vocab.end() ? -1 : it->second;
  };
  const ByteLevelAlphabet& byte_level = ByteLevelAlphabet::Get();
  has_byte_fallback_ = true;
  for (int b = 0; b < 256; ++b) {
    byte_symbol_[b] = alphabet_ == BpeAlphabet::kByteLevel
                          ? find(byte_level.Spelling(static_cast<uint8_t>(b))) : -1;
    // A byte with neither a byte-level symbol nor a <0xNN> token is dropped, as llama.cpp
    // does: SmolLM's unknown id is <|endoftext|>, which would end generation mid-prompt.
    byte_fallback_[b] = find(absl::StrFormat("<0x%02X>", b));
    has_byte_fallback_ = has_byte_fallback_ && byte_fallback_[b] >= 0;
  }
  if (alphabet_ == BpeAlphabet::kUtf8Chars) {
    for (const auto& [text, id] : vocab) {
      if (text.empty()) continue;
      const Utf8Decoded d = DecodeUtf8At(text, 0);
      if (d.status == Utf8Status::kValid && d.length == text.size()) {
        char_ids_.emplace(text, id);
      }
    }
  }
}

void BpeMerger::AddRule(const BpeMergeRule& r) {
  // try_emplace keeps the first (lowest) rank of a duplicated merge.
  pairs_.try_emplace(PairKey(r.left, r.right), MergeResult{r.rank, r.merged});
}

BpeMerger::BpeMerger(const absl::flat_hash_map<std::string, int32_t>& vocab,
                     absl::Span<const std::string_view> merges, BpeAlphabet alphabet,
                     int32_t unknown_id)
    : alphabet_(alphabet), unknown_id_(unknown_id) {
  InitAlphabet(vocab);
  const auto find = [&](std::string_view text) -> int32_t {
    auto it = vocab.find(Av(text));
    return it == vocab.end() ? -1 : it->second;
  };
  pairs_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view merge = merges[rank];
    const size_t space = merge.find(' ', 1);  // a part is never empty
    if (space == std::string_view::npos) {
      ++skipped_merges_;
      continue;
    }
    const std::string_view left = merge.substr(0, space);
    const std::string_view right = merge.substr(space + 1);
    const BpeMergeRule rule{find(left), find(right), find(std::string(left) + std::string(right)),
                            static_cast<int32_t>(rank)};
    if (rule.left < 0 || rule.right < 0 || rule.merged < 0) {
      ++skipped_merges_;
      continue;
    }
    AddRule(rule);
  }
}

BpeMerger::BpeMerger(const absl::flat_hash_map<std::string, int32_t>& vocab,
                     absl::Span<const BpeMergeRule> rules, BpeAlphabet alphabet, int32_t unknown_id)
    : alphabet_(alphabet), unknown_id_(unknown_id) {
  InitAlphabet(vocab);
  pairs_.reserve(rules.size());
  for (const BpeMergeRule& r : rules) {
    if (r.left < 0 || r.right < 0 || r.merged < 0) {
      ++skipped_merges_;
      continue;
    }
    AddRule(r);
  }
}

void BpeMerger::InitialSymbols(std::string_view piece, std::vector<int32_t>& ids) const {
  if (alphabet_ == BpeAlphabet::kByteLevel) {
    for (char c : piece) {
      const uint8_t b = static_cast<uint8_t>(c);
      ids.push_back(byte_symbol_[b] >= 0 ? byte_symbol_[b] : -1 - b);
    }
    return;
  }
  for (size_t i = 0; i < piece.size();) {
    const Utf8Decoded d = DecodeUtf8At(piece, i);
    const size_t len = d.status == Utf8Status::kValid ? d.length : 1;  // invalid bytes stand alone
    const std::string_view ch = piece.substr(i, len);
    auto it = char_ids_.find(Av(ch));
    if (it != char_ids_.end()) {
      ids.push_back(it->second);
    } else if (has_byte_fallback_) {
      for (char c : ch) ids.push_back(-1 - static_cast<uint8_t>(c));
    } else {
      ids.push_back(kUnknownChar);
    }
    i += len;
  }
}

void BpeMerger::Merge(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  std::vector<int32_t> initial;  // [symbols]
  initial.reserve(piece.size());
  InitialSymbols(piece, initial);
  const int32_t n = static_cast<int32_t>(initial.size());
  std::vector<Symbol> symbols(n);  // [n], linked list in piece order
  for (int32_t i = 0; i < n; ++i) symbols[i] = {initial[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> heap;
  const auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    auto it = pairs_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == pairs_.end()) return;
    heap.push({it->second.rank, left, symbols[left].id, symbols[right].id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.left];
    // Stale entry: the left symbol was merged away or changed, or its neighbour changed.
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    const int32_t right = left.next;
    left.id = pairs_.find(PairKey(c.left_id, c.right_id))->second.merged;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    symbols[right].id = INT32_MIN;  // dead
    push_pair(left.prev);
    push_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const int32_t id = symbols[i].id;
    const int32_t resolved = id >= 0 ? id : id == kUnknownChar ? unknown_id_ : byte_fallback_[-1 - id];
    if (resolved >= 0) out.push_back(resolved);  // no byte token and no unknown id: unrepresentable
  }
}

}  // namespace witcert
