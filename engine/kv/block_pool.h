// Fixed pool of KV blocks with reference counts (vLLM-style): a block id indexes every
// layer's storage, so one block table per sequence serves all layers. Share/Release exist
// for a future prefix cache. Thread-safe (one mutex; allocation is not on the hot path).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace witcert {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  // `n` blocks with refcount 1, all or nothing; ResourceExhausted when fewer are free.
  absl::StatusOr<std::vector<int32_t>> Allocate(int64_t n);
  // refcount += 1 (block must be allocated).
  void Share(int32_t block);
  // refcount −= 1; true when the block returned to the free list.
  bool Release(int32_t block);
  int32_t RefCount(int32_t block) const;

  int64_t num_free() const;
  int64_t num_total() const { return num_total_; }

 private:
  const int64_t num_total_;
  mutable absl::Mutex mu_;
  std::vector<int32_t> free_ ABSL_GUARDED_BY(mu_);      // stack of free ids
  std::vector<int32_t> refcount_ ABSL_GUARDED_BY(mu_);  // [num_blocks]
};

}  // namespace witcert
