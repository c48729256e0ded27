// LRU cache of exact (fp32) KV blocks promoted by the gate, keyed by (physical block, layer,
// KV head), with its own block budget. A hit means the block is read exact (ε̂ = 0, ρ = 0)
// for later steps too. Thread-safe (one mutex; entries are immutable shared_ptrs).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace witcert {

struct ExactBlock {
  std::vector<float> k, v;  // [block_size, head_dim] each
};

class ExactBlockCache {
 public:
  explicit ExactBlockCache(int64_t capacity_blocks) : capacity_(capacity_blocks) {}

  std::shared_ptr<const ExactBlock> Lookup(int32_t block, int32_t layer, int32_t kv_head);
  // Inserts (LRU-evicting); no-op when the capacity is 0.
  void Insert(int32_t block, int32_t layer, int32_t kv_head,
              std::shared_ptr<const ExactBlock> entry);
  // Drops every entry of a physical block (it was freed or reallocated).
  void InvalidateBlock(int32_t block);
  int64_t size() const;
  int64_t capacity() const { return capacity_; }
  int64_t evictions() const;

 private:
  using Key = uint64_t;  // block << 32 | layer << 16 | kv_head
  static Key MakeKey(int32_t block, int32_t layer, int32_t kv_head) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(block)) << 32) |
           (static_cast<uint64_t>(layer & 0xffff) << 16) | static_cast<uint64_t>(kv_head & 0xffff);
  }
  struct Slot {
    std::shared_ptr<const ExactBlock> entry;
    std::list<Key>::iterator lru_it;
  };
  const int64_t capacity_;
  mutable absl::Mutex mu_;
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  absl::flat_hash_map<Key, Slot> map_ ABSL_GUARDED_BY(mu_);
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace witcert
