// PrefixIndex: which physical KV blocks hold which token prefixes (automatic prefix caching).
//
// A full block is keyed by its parent block (the block before it in its sequence; −1 for a
// sequence's first block) and its block_size token ids, so a lookup walks a prompt block by
// block from the root and a hit means the whole prefix up to that block matches token for
// token (no hashing of the prefix, hence no collisions). A child is only reachable through its
// parent, and a parent is evicted only after its children, so a reused block id can never
// make a stale child reachable.
//
// The index holds one reference on every block it lists (KvCache takes it from the pool).
// A listed block that no sequence holds any more is "idle": idle leaves are evicted least
// recently used first when the pool needs blocks. The index does not know the pool; KvCache
// tells it when a block becomes idle or busy and releases what it evicts. Not thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace witcert {

class PrefixIndex {
 public:
  using Token = int32_t;

  // The block listed under (parent, tokens), or −1.
  int32_t Find(int32_t parent, absl::Span<const Token> tokens) const;
  bool Contains(int32_t block) const { return entries_.contains(block); }
  // Lists `block` under (parent, tokens) as busy. False (nothing changes) when that key is
  // listed already, when `block` is, or when the parent is not listed (parent ≥ 0).
  bool Insert(int32_t parent, absl::Span<const Token> tokens, int32_t block);
  // A listed block was taken by a sequence (busy: not evictable) or dropped by its last one.
  void MarkBusy(int32_t block);
  void MarkIdle(int32_t block);
  // Unlists the least recently used idle block without listed children; −1 when none.
  int32_t EvictOne();

  int64_t num_blocks() const { return static_cast<int64_t>(entries_.size()); }
  int64_t num_idle() const { return num_idle_; }

 private:
  struct Key {
    int32_t parent = -1;
    std::vector<Token> tokens;
    bool operator==(const Key& o) const { return parent == o.parent && tokens == o.tokens; }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.parent, k.tokens);
    }
  };
  struct Entry {
    Key key;
    int32_t children = 0;  // listed blocks whose parent is this one
    bool idle = false;
    uint64_t last_use = 0;
  };
  void UpdateEvictable(int32_t block, const Entry& e);

  absl::flat_hash_map<Key, int32_t> by_key_;
  absl::flat_hash_map<int32_t, Entry> entries_;
  std::set<std::pair<uint64_t, int32_t>> evictable_;  // (last use, block): idle leaves
  uint64_t clock_ = 0;
  int64_t num_idle_ = 0;
};

}  // namespace witcert
