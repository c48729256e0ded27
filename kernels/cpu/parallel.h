// A fixed pool of worker threads for data-parallel loops over independent rows.
//
// The forward pass calls ParallelFor a few hundred times per token, so dispatch must be
// cheap: workers spin briefly, then yield, on a generation counter before sleeping.
#pragma once

#include <cstdint>
#include <functional>

namespace witcert {

class ThreadPool {
 public:
  // `num_threads` <= 0 → std::thread::hardware_concurrency(). The calling thread takes
  // part in every loop, so a pool of N threads starts N-1 workers.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const;
  // Splits [0, n) into contiguous chunks of at least `min_chunk` and calls
  // fn(begin, end) on them across threads; returns when all are done. Not reentrant.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace witcert
