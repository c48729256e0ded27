#include "engine/kv/exact_block_cache.h"

namespace witcert {

std::shared_ptr<const ExactBlock> ExactBlockCache::Lookup(int32_t block, int32_t layer,
                                                          int32_t kv_head) {
  absl::MutexLock lock(&mu_);
  auto it = map_.find(MakeKey(block, layer, kv_head));
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru_it);
  return it->second.entry;
}

void ExactBlockCache::Insert(int32_t block, int32_t layer, int32_t kv_head,
                             std::shared_ptr<const ExactBlock> entry) {
  if (capacity_ <= 0) return;
  absl::MutexLock lock(&mu_);
  Key key = MakeKey(block, layer, kv_head);
  auto it = map_.find(key);
  if (it != map_.end()) {
    it->second.entry = std::move(entry);
    lru_.splice(lru_.begin(), lru_, it->second.lru_it);
    return;
  }
  while (static_cast<int64_t>(map_.size()) >= capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
    ++evictions_;
  }
  lru_.push_front(key);
  map_[key] = Slot{std::move(entry), lru_.begin()};
}

void ExactBlockCache::InvalidateBlock(int32_t block) {
  absl::MutexLock lock(&mu_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (static_cast<int32_t>(*it >> 32) == block) {
      map_.erase(*it);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t ExactBlockCache::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(map_.size());
}

int64_t ExactBlockCache::evictions() const {
  absl::MutexLock lock(&mu_);
  return evictions_;
}

}  // namespace witcert
