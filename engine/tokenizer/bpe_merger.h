// BPE merging of one pre-tokenized piece over the GPT-2 byte-level alphabet.
//
// Symbols start as one token per byte (the byte's byte-level spelling); the adjacent pair
// with the lowest merge rank is merged repeatedly (ties: leftmost pair), using a min-heap
// over a linked list of symbols so a long piece (a run of 10k spaces) costs O(n log n), not
// O(n^2). Pairs are keyed by token ids, not strings: a merge "a b" is kept only when a, b
// and "ab" are all in the vocabulary. A byte whose spelling is not a token falls back to
// the "<0xNN>" byte token when the vocabulary has one, else to the unknown id.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace witcert {

class BpeMerger {
 public:
  // `vocab` maps byte-level token text to id; `merges` are "left right" strings, rank =
  // index. Merges whose parts are not tokens are skipped (counted in skipped_merges()).
  BpeMerger(const absl::flat_hash_map<std::string, int32_t>& vocab,
            absl::Span<const std::string_view> merges, int32_t unknown_id);

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

  std::array<int32_t, 256> byte_symbol_{};    // byte-level spelling's id, or -1
  std::array<int32_t, 256> byte_fallback_{};  // <0xNN> id, else the unknown id (may be -1)
  absl::flat_hash_map<uint64_t, MergeResult> pairs_;
  size_t skipped_merges_ = 0;
};

}  // namespace witcert
