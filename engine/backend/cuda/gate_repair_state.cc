#include "engine/backend/cuda/gate_repair_state.h"

#include <algorithm>

namespace witcert {

ExactEntryTable::ExactEntryTable(int64_t num_entries, int64_t num_blocks)
    : entry_of_block_(num_blocks, -1),
      block_of_entry_(std::max<int64_t>(num_entries, 0), -1),
      finished_at_(num_blocks, 0),
      refused_block_(num_blocks, 0) {
  free_.reserve(block_of_entry_.size());
  for (int64_t e = num_entries - 1; e >= 0; --e) free_.push_back(static_cast<int32_t>(e));
}

void ExactEntryTable::Release(int32_t block) {
  const int32_t e = entry_of_block_[block];
  if (e < 0) return;
  entry_of_block_[block] = -1;
  block_of_entry_[e] = -1;
  free_.push_back(e);
}

void ExactEntryTable::OnAllocate(int32_t block) {
  Release(block);
  finished_at_[block] = 0;  // stale queue records are skipped by their timestamp
  refused_block_[block] = 0;
}

void ExactEntryTable::OnFinished(int32_t block) {
  finished_at_[block] = ++clock_;
  if (entry_of_block_[block] >= 0) finished_.emplace_back(block, clock_);
}

int32_t ExactEntryTable::Acquire(int32_t block) {
  if (entry_of_block_[block] >= 0) return entry_of_block_[block];
  if (refused_block_[block]) return -1;
  while (free_.empty() && !finished_.empty()) {
    const auto [victim, at] = finished_.front();
    finished_.pop_front();
    if (finished_at_[victim] != at || entry_of_block_[victim] < 0) continue;  // stale record
    Release(victim);
    ++evicted_;
  }
  if (free_.empty()) {
    refused_block_[block] = 1;
    ++refused_;
    return -1;
  }
  const int32_t e = free_.back();
  free_.pop_back();
  entry_of_block_[block] = e;
  block_of_entry_[e] = block;
  return e;
}

std::vector<TableUpdate> LastUpdatePerEntry(std::vector<TableUpdate>* pending) {
  absl::flat_hash_map<int64_t, size_t> last;  // entry → its last update's position
  for (size_t i = 0; i < pending->size(); ++i) last[(*pending)[i].index] = i;
  std::vector<TableUpdate> updates;
  updates.reserve(last.size());
  for (size_t i = 0; i < pending->size(); ++i) {
    if (last[(*pending)[i].index] == i) updates.push_back((*pending)[i]);
  }
  pending->clear();
  return updates;
}

ExactSlotCache::ExactSlotCache(int64_t capacity, int32_t num_layers, int32_t num_kv_heads)
    : capacity_(std::max<int64_t>(capacity, 0)), num_layers_(num_layers), num_kv_heads_(num_kv_heads) {
  free_slots_.reserve(capacity_);
  for (int64_t s = capacity_ - 1; s >= 0; --s) free_slots_.push_back(static_cast<int32_t>(s));
}

int32_t ExactSlotCache::Find(int32_t block, int32_t layer, int32_t kv_head) const {
  auto it = map_.find(TableIndex(block, layer, kv_head));
  return it == map_.end() ? -1 : it->second.slot;
}

void ExactSlotCache::Remove(int64_t index, std::vector<TableUpdate>* updates) {
  auto it = map_.find(index);
  if (it == map_.end()) return;
  const Unit u = it->second;
  map_.erase(it);
  lru_.erase(u.lru);
  free_slots_.push_back(u.slot);
  const int32_t layer = static_cast<int32_t>((index / num_kv_heads_) % num_layers_);
  auto r = resident_.find(u.owner);
  if (r != resident_.end() && --r->second[layer] == 0 &&
      std::all_of(r->second.begin(), r->second.end(), [](int32_t c) { return c == 0; })) {
    resident_.erase(r);
  }
  updates->push_back(TableUpdate{.index = index, .value = -1});
}

int32_t ExactSlotCache::Insert(int32_t block, int32_t layer, int32_t kv_head, int64_t owner,
                               std::vector<TableUpdate>* updates) {
  if (capacity_ == 0) return -1;
  const int64_t index = TableIndex(block, layer, kv_head);
  if (free_slots_.empty()) {
    const int64_t victim = lru_.back();
    const int32_t victim_block = static_cast<int32_t>(victim / (int64_t{num_layers_} * num_kv_heads_));
    Remove(victim, updates);
    auto& units = units_of_block_[victim_block];
    units.erase(std::remove(units.begin(), units.end(), victim), units.end());
    if (units.empty()) units_of_block_.erase(victim_block);
    ++evictions_;
  }
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  lru_.push_front(index);
  map_[index] = Unit{.slot = slot, .owner = owner, .lru = lru_.begin()};
  units_of_block_[block].push_back(index);
  auto& counts = resident_[owner];
  if (counts.empty()) counts.assign(num_layers_, 0);
  ++counts[layer];
  // The table entry is set by the page-in kernel once the copy has landed.
  return slot;
}

void ExactSlotCache::InvalidateBlock(int32_t block, std::vector<TableUpdate>* updates) {
  auto it = units_of_block_.find(block);
  if (it == units_of_block_.end()) return;
  for (int64_t index : it->second) Remove(index, updates);
  units_of_block_.erase(it);
}

int32_t ExactSlotCache::Resident(int64_t owner, int32_t layer) const {
  auto it = resident_.find(owner);
  return it == resident_.end() ? 0 : it->second[layer];
}

}  // namespace witcert
