// BPE merging of one pre-tokenized piece.
//
// Symbols start as one token per byte's GPT-2 byte-level spelling (byte-level BPE: GPT-2,
// Llama 3, Qwen2) or one token per UTF-8 character (SentencePiece-style BPE: Llama 2,
// Mistral); the adjacent pair with the lowest merge rank is merged repeatedly (ties: leftmost
// pair), using a min-heap over a linked list of symbols so a long piece (a run of 10k
// spaces) costs O(n log n), not O(n^2). Pairs are keyed by token ids, not strings: a merge
// "a b" is kept only when a, b and "ab" are all in the vocabulary. A byte (byte-level) or
// character (SentencePiece) that is not a token falls back to its "<0xNN>" byte tokens when
// the vocabulary has them; otherwise a character becomes the unknown id and a byte is dropped.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace witcert {

enum class BpeAlphabet : uint8_t {
  kByteLevel,  // initial symbols: each byte's GPT-2 byte-level spelling
  kUtf8Chars,  // initial symbols: each UTF-8 character (an invalid byte: itself)
};

// A merge given by ids (SentencePiece vocabularies have scores, not merge lists).
struct BpeMergeRule {
  int32_t left = -1;
  int32_t right = -1;
  int32_t merged = -1;
  int32_t rank = 0;  // lower merges first
};

class BpeMerger {
 public:
  // `vocab` maps token text to id; `merges` are "left right" strings, rank = index. Merges
  // whose parts are not tokens are skipped (counted in skipped_merges()).
  BpeMerger(const absl::flat_hash_map<std::string, int32_t>& vocab,
            absl::Span<const std::string_view> merges, BpeAlphabet alphabet, int32_t unknown_id);
  // The same with merges given by id (the first rule of a repeated pair wins).
  BpeMerger(const absl::flat_hash_map<std::string, int32_t>& vocab,
            absl::Span<const BpeMergeRule> rules, BpeAlphabet alphabet, int32_t unknown_id);

  // Appends the ids of `piece` (raw bytes) to `out`.
  void Merge(std::string_view piece, std::vector<int32_t>& out) const;

  size_t skipped_merges() const { return skipped_merges_; }

 private:
  struct MergeResult {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  void InitAlphabet(const absl::flat_hash_map<std::string, int32_t>& vocab);
  void AddRule(const BpeMergeRule& rule);
  // Appends `piece`'s initial symbol ids: ≥ 0 a token; −1 − b byte b without one;
  // kUnknownChar a character without a token or byte tokens.
  void InitialSymbols(std::string_view piece, std::vector<int32_t>& ids) const;

  static constexpr int32_t kUnknownChar = -257;

  BpeAlphabet alphabet_;
  int32_t unknown_id_;
  std::array<int32_t, 256> byte_symbol_{};    // byte-level spelling's id, or -1
  std::array<int32_t, 256> byte_fallback_{};  // <0xNN> id, or -1
  bool has_byte_fallback_ = false;            // every byte has a <0xNN> token
  absl::flat_hash_map<std::string, int32_t> char_ids_;  // kUtf8Chars: one-character tokens
  absl::flat_hash_map<uint64_t, MergeResult> pairs_;
  size_t skipped_merges_ = 0;
};

}  // namespace witcert
