#include "engine/kv/block_pool.h"

#include "absl/strings/str_cat.h"

namespace witcert {

BlockPool::BlockPool(int64_t num_blocks) : num_total_(num_blocks), refcount_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (int64_t i = num_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

absl::StatusOr<std::vector<int32_t>> BlockPool::Allocate(int64_t n) {
  absl::MutexLock lock(&mu_);
  if (n < 0) return absl::InvalidArgumentError("negative block count");
  if (static_cast<int64_t>(free_.size()) < n) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool exhausted: need ", n, " blocks, ", free_.size(), " free of ",
                     num_total_));
  }
  std::vector<int32_t> out(n);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = free_.back();
    free_.pop_back();
    refcount_[out[i]] = 1;
  }
  return out;
}

void BlockPool::Share(int32_t block) {
  absl::MutexLock lock(&mu_);
  if (refcount_[block] > 0) ++refcount_[block];
}

bool BlockPool::Release(int32_t block) {
  absl::MutexLock lock(&mu_);
  if (refcount_[block] <= 0) return false;  // double release: ignored (internal invariant)
  if (--refcount_[block] == 0) {
    free_.push_back(block);
    return true;
  }
  return false;
}

int32_t BlockPool::RefCount(int32_t block) const {
  absl::MutexLock lock(&mu_);
  return refcount_[block];
}

int64_t BlockPool::num_free() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(free_.size());
}

}  // namespace witcert
