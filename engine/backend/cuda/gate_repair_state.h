// Host bookkeeping of the gate's repair mode on the GPU (kernels/cuda/gate_repair_cuda.h has
// the units and layouts): which physical block owns an entry of the pinned-host backing store,
// and which (block, layer, KV head) unit owns a slot of the device exact-block cache. Pure host
// logic (no CUDA calls), so it is tested without a GPU; CudaBackend owns the memory and turns
// the updates returned here into device work.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kernels/cuda/gate_repair_cuda.h"

namespace witcert {

// Host-store entries (one per physical block, all layers), with the CPU BackingStore's policy:
// an entry is taken at the block's first write-through; when none is free, the entry of the
// block finished longest ago is evicted; when no block is finished the write is refused and
// the block stays unrepairable until it is reallocated.
class ExactEntryTable {
 public:
  ExactEntryTable(int64_t num_entries, int64_t num_blocks);

  // The block was (re)allocated: an entry it still holds belongs to its old owner.
  void OnAllocate(int32_t block);
  // The block's sequence finished: its entry may be evicted (oldest finished first).
  void OnFinished(int32_t block);
  // The block's entry, taking one if it has none; −1 when refused (no space).
  int32_t Acquire(int32_t block);
  int32_t Find(int32_t block) const { return entry_of_block_[block]; }

  int64_t num_entries() const { return static_cast<int64_t>(block_of_entry_.size()); }
  int64_t used() const { return num_entries() - static_cast<int64_t>(free_.size()); }
  int64_t evicted() const { return evicted_; }
  int64_t refused() const { return refused_; }

 private:
  void Release(int32_t block);

  std::vector<int32_t> entry_of_block_;  // [num_blocks], −1: none
  std::vector<int32_t> block_of_entry_;  // [num_entries], −1: free
  std::vector<int32_t> free_;
  std::vector<uint64_t> finished_at_;     // [num_blocks], 0: owned by a live sequence
  std::vector<uint8_t> refused_block_;    // [num_blocks]: refused for its current owner
  std::deque<std::pair<int32_t, uint64_t>> finished_;  // (block, finished_at), oldest first
  uint64_t clock_ = 0;
  int64_t evicted_ = 0, refused_ = 0;
};

// The updates in list order as ApplyTableUpdatesCuda applies them (in parallel, so one per
// entry): the last update of each entry, the others dropped. Clears `pending`.
std::vector<TableUpdate> LastUpdatePerEntry(std::vector<TableUpdate>* pending);

// Device exact-cache slots, least recently promoted evicted first. A unit's slot is listed
// in the device table at TableIndex(); every change is appended to `updates` for the device.
class ExactSlotCache {
 public:
  ExactSlotCache(int64_t capacity, int32_t num_layers, int32_t num_kv_heads);

  int64_t TableIndex(int32_t block, int32_t layer, int32_t kv_head) const {
    return (int64_t{block} * num_layers_ + layer) * num_kv_heads_ + kv_head;
  }
  int32_t Find(int32_t block, int32_t layer, int32_t kv_head) const;
  // A slot for the unit (owned by sequence `owner`), evicting the least recently promoted
  // unit when full; −1 when the capacity is 0. The unit must not be cached already.
  int32_t Insert(int32_t block, int32_t layer, int32_t kv_head, int64_t owner,
                 std::vector<TableUpdate>* updates);
  // Drops every unit of the block (freed or reallocated).
  void InvalidateBlock(int32_t block, std::vector<TableUpdate>* updates);
  // Units of `owner` cached for `layer` (rows with any read through the exact kernel).
  int32_t Resident(int64_t owner, int32_t layer) const;

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return static_cast<int64_t>(map_.size()); }
  int64_t evictions() const { return evictions_; }

 private:
  struct Unit {
    int32_t slot = -1;
    int64_t owner = 0;
    std::list<int64_t>::iterator lru;
  };
  void Remove(int64_t index, std::vector<TableUpdate>* updates);

  const int64_t capacity_;
  const int32_t num_layers_, num_kv_heads_;
  absl::flat_hash_map<int64_t, Unit> map_;  // table index → unit
  std::list<int64_t> lru_;                  // front: most recently promoted
  std::vector<int32_t> free_slots_;
  absl::flat_hash_map<int32_t, std::vector<int64_t>> units_of_block_;
  absl::flat_hash_map<int64_t, std::vector<int32_t>> resident_;  // owner → [L] counts
  int64_t evictions_ = 0;
};

}  // namespace witcert
