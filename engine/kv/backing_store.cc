#include "engine/kv/backing_store.h"

#include <cstring>

namespace witcert {

BackingStore::BackingStore(int64_t capacity_bytes, int32_t num_layers, int32_t block_size,
                           int32_t num_kv_heads, int32_t head_dim)
    : num_layers_(num_layers),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      entry_floats_(static_cast<int64_t>(num_layers) * block_size * num_kv_heads * head_dim),
      entry_bytes_(2 * entry_floats_ * static_cast<int64_t>(sizeof(float))) {
  stats_.capacity_bytes = capacity_bytes;
}

void BackingStore::OnAllocate(int32_t block) {
  absl::MutexLock lock(&mu_);
  refused_.erase(block);
  auto it = entries_.find(block);
  if (it != entries_.end()) {
    stats_.used_bytes -= entry_bytes_;
    entries_.erase(it);  // its finished_ queue slot is now stale (checked on eviction)
  }
  stats_.entries = static_cast<int64_t>(entries_.size());
}

void BackingStore::MarkFinished(int32_t block) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(block);
  if (it == entries_.end()) return;
  it->second->finished = true;
  it->second->finish_seq = ++finish_counter_;
  finished_.emplace_back(block, it->second->finish_seq);
}

BackingStore::Entry* BackingStore::GetOrCreate(int32_t block) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(block);
  if (it != entries_.end()) return it->second.get();
  if (refused_.contains(block)) return nullptr;
  while (stats_.used_bytes + entry_bytes_ > stats_.capacity_bytes && !finished_.empty()) {
    auto [victim, seq] = finished_.front();
    finished_.pop_front();
    auto v = entries_.find(victim);
    if (v == entries_.end() || !v->second->finished || v->second->finish_seq != seq) continue;
    entries_.erase(v);
    stats_.used_bytes -= entry_bytes_;
    ++stats_.evicted_blocks;
  }
  if (stats_.used_bytes + entry_bytes_ > stats_.capacity_bytes) {
    refused_.insert(block);
    ++stats_.refused_blocks;
    return nullptr;
  }
  auto e = std::make_unique<Entry>();
  e->k.reset(new float[entry_floats_]());
  e->v.reset(new float[entry_floats_]());
  Entry* raw = e.get();
  entries_[block] = std::move(e);
  stats_.used_bytes += entry_bytes_;
  stats_.entries = static_cast<int64_t>(entries_.size());
  return raw;
}

void BackingStore::Write(int32_t block, int32_t layer, int32_t offset, const float* k,
                         const float* v) {
  Entry* e = GetOrCreate(block);
  if (e == nullptr) return;
  const int64_t row = static_cast<int64_t>(num_kv_heads_) * head_dim_;
  const int64_t at = (static_cast<int64_t>(layer) * block_size_ + offset) * row;
  std::memcpy(e->k.get() + at, k, sizeof(float) * row);
  std::memcpy(e->v.get() + at, v, sizeof(float) * row);
}

bool BackingStore::Read(int32_t block, int32_t layer, int32_t kv_head, float* k, float* v) {
  Entry* e = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(block);
    if (it == entries_.end()) {
      ++stats_.unrepairable_reads;
      return false;
    }
    e = it->second.get();
  }
  const int64_t row = static_cast<int64_t>(num_kv_heads_) * head_dim_;
  for (int32_t t = 0; t < block_size_; ++t) {
    const int64_t at = (static_cast<int64_t>(layer) * block_size_ + t) * row +
                       static_cast<int64_t>(kv_head) * head_dim_;
    std::memcpy(k + static_cast<int64_t>(t) * head_dim_, e->k.get() + at, sizeof(float) * head_dim_);
    std::memcpy(v + static_cast<int64_t>(t) * head_dim_, e->v.get() + at, sizeof(float) * head_dim_);
  }
  return true;
}

bool BackingStore::Reclaim(int32_t block) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(block);
  if (it == entries_.end()) return false;
  it->second->finished = false;  // its finished_ queue slot, if any, is now stale
  return true;
}

bool BackingStore::Has(int32_t block) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(block);
}

BackingStoreStats BackingStore::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace witcert
