// Host-memory store of every written token's exact K/V (fp32), per physical block: the
// source the gate pages exact copies from (certificates.md §6).
//
// Capacity is in bytes. An entry (one block, all layers) is created at the block's first
// write. When full, entries of FINISHED blocks (their sequence was freed) are evicted oldest
// first; if none is left the new block is not stored ("refused") and stays unrepairable:
// both are counted. Thread-safe: the map is behind a mutex, and an entry's rows are written
// only by the sequence that owns the block, so row copies run outside the lock.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace witcert {

struct BackingStoreStats {
  int64_t capacity_bytes = 0;
  int64_t used_bytes = 0;
  int64_t entries = 0;
  int64_t evicted_blocks = 0;       // finished entries dropped for space
  int64_t refused_blocks = 0;       // blocks never stored (no space): unrepairable
  int64_t unrepairable_reads = 0;   // page-ins that found no exact copy
};

class BackingStore {
 public:
  // One block's exact K and V: [num_layers, block_size, num_kv_heads, head_dim] each.
  BackingStore(int64_t capacity_bytes, int32_t num_layers, int32_t block_size,
               int32_t num_kv_heads, int32_t head_dim);

  // A block was (re)allocated: any previous entry belongs to an old owner and is dropped.
  void OnAllocate(int32_t block);
  // The block's sequence finished: its entry becomes evictable (oldest finished first).
  // A finished block is in use again (a prefix-cache hit): its entry stops being evictable.
  // False when the entry is gone.
  bool Reclaim(int32_t block);
  void MarkFinished(int32_t block);
  // Stores token `offset` of `block` for `layer`: k, v [num_kv_heads, head_dim].
  void Write(int32_t block, int32_t layer, int32_t offset, const float* k, const float* v);
  // Copies one KV head of one block/layer: k, v [block_size, head_dim]. false (and counts an
  // unrepairable read) when the exact copy is gone.
  bool Read(int32_t block, int32_t layer, int32_t kv_head, float* k, float* v);
  bool Has(int32_t block) const;
  BackingStoreStats stats() const;
  int64_t entry_bytes() const { return entry_bytes_; }

 private:
  struct Entry {
    std::unique_ptr<float[]> k, v;  // [L, block_size, Hkv, d] each
    bool finished = false;
    uint64_t finish_seq = 0;
  };
  Entry* GetOrCreate(int32_t block);

  const int32_t num_layers_, block_size_, num_kv_heads_, head_dim_;
  const int64_t entry_floats_;  // per K (and per V)
  const int64_t entry_bytes_;
  mutable absl::Mutex mu_;
  BackingStoreStats stats_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int32_t, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int32_t> refused_ ABSL_GUARDED_BY(mu_);  // current owners' lost blocks
  std::deque<std::pair<int32_t, uint64_t>> finished_ ABSL_GUARDED_BY(mu_);  // (block, seq)
  uint64_t finish_counter_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace witcert
