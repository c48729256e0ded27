#include "engine/kv/prefix_index.h"

namespace witcert {

int32_t PrefixIndex::Find(int32_t parent, absl::Span<const Token> tokens) const {
  Key key{parent, std::vector<Token>(tokens.begin(), tokens.end())};
  auto it = by_key_.find(key);
  return it == by_key_.end() ? -1 : it->second;
}

bool PrefixIndex::Insert(int32_t parent, absl::Span<const Token> tokens, int32_t block) {
  if (entries_.contains(block)) return false;
  if (parent >= 0 && !entries_.contains(parent)) return false;
  Key key{parent, std::vector<Token>(tokens.begin(), tokens.end())};
  if (by_key_.contains(key)) return false;
  by_key_.emplace(key, block);
  Entry e;
  e.key = std::move(key);
  e.last_use = ++clock_;
  entries_.emplace(block, std::move(e));
  if (parent >= 0) {
    Entry& p = entries_.at(parent);
    evictable_.erase({p.last_use, parent});  // a parent with children is not a leaf
    ++p.children;
  }
  return true;
}

void PrefixIndex::UpdateEvictable(int32_t block, const Entry& e) {
  if (e.idle && e.children == 0) {
    evictable_.insert({e.last_use, block});
  } else {
    evictable_.erase({e.last_use, block});
  }
}

void PrefixIndex::MarkBusy(int32_t block) {
  auto it = entries_.find(block);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  evictable_.erase({e.last_use, block});
  if (e.idle) --num_idle_;
  e.idle = false;
  e.last_use = ++clock_;
}

void PrefixIndex::MarkIdle(int32_t block) {
  auto it = entries_.find(block);
  if (it == entries_.end() || it->second.idle) return;
  Entry& e = it->second;
  evictable_.erase({e.last_use, block});
  e.idle = true;
  ++num_idle_;
  e.last_use = ++clock_;
  UpdateEvictable(block, e);
}

int32_t PrefixIndex::EvictOne() {
  if (evictable_.empty()) return -1;
  const int32_t block = evictable_.begin()->second;
  evictable_.erase(evictable_.begin());
  auto it = entries_.find(block);
  const int32_t parent = it->second.key.parent;
  by_key_.erase(it->second.key);
  entries_.erase(it);
  --num_idle_;
  if (parent >= 0) {
    Entry& p = entries_.at(parent);
    --p.children;
    UpdateEvictable(parent, p);
  }
  return block;
}

}  // namespace witcert
