// ThreadPool: N-1 workers plus the calling thread, dispatched through a generation counter.
//
// Why this shape: a decode step issues a few hundred ParallelFor calls of 10-100 µs each, so
// a condition-variable round trip per call (tens of µs when a worker sleeps) would dominate.
// Workers therefore spin ~kSpinMicros on the atomic generation before sleeping, and the
// caller only touches the mutex when some worker is actually asleep. Chunks are claimed from
// an atomic counter (load balance on a shared machine); which thread runs a chunk never
// changes its result, so outputs do not depend on the thread count.
//
// Memory ordering: the caller writes the job fields, then bumps `generation` (seq_cst);
// workers read them only after observing the new generation. The caller reuses the fields
// only after `pending` (every worker's acknowledgement, acq_rel) reaches zero, so a slow
// worker can never run a stale job against new chunk indices.
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace witcert {
namespace {

constexpr int64_t kSpinMicros = 30;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

struct ThreadPool::Impl {
  int num_threads = 1;
  std::vector<std::thread> workers;

  std::mutex mu;
  std::condition_variable work_cv;  // workers sleep here waiting for a new generation
  std::condition_variable done_cv;  // the caller sleeps here waiting for pending == 0
  std::atomic<uint64_t> generation{0};
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};

  // Job description, written by the caller before a generation bump.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t num_chunks = 0;
  std::atomic<int64_t> next_chunk{0};
  std::atomic<int> pending{0};

  void RunChunks() {
    for (;;) {
      const int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks) return;
      // Even split: chunk c covers [c*n/k, (c+1)*n/k).
      const int64_t begin = c * n / num_chunks;
      const int64_t end = (c + 1) * n / num_chunks;
      (*fn)(begin, end);
    }
  }

  void WorkerLoop() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t gen = generation.load();
      if (gen == seen && !stop.load()) {
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
        for (int i = 0;; ++i) {
          CpuRelax();
          gen = generation.load();
          if (gen != seen || stop.load()) break;
          if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) {
            std::unique_lock<std::mutex> lock(mu);
            sleepers.fetch_add(1);
            work_cv.wait(lock, [&] { return generation.load() != seen || stop.load(); });
            sleepers.fetch_sub(1);
            gen = generation.load();
            break;
          }
        }
      }
      if (stop.load()) return;
      seen = gen;
      RunChunks();
      if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // Taking the mutex orders this notify after the caller's predicate check.
        std::lock_guard<std::mutex> lock(mu);
        done_cv.notify_one();
      }
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : impl_(new Impl) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  impl_->num_threads = num_threads;
  impl_->workers.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) {
    impl_->workers.emplace_back([this] { impl_->WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop.store(true);
  }
  impl_->work_cv.notify_all();
  for (std::thread& t : impl_->workers) t.join();
  delete impl_;
}

int ThreadPool::num_threads() const { return impl_->num_threads; }

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t num_chunks =
      std::min<int64_t>(impl_->num_threads, std::max<int64_t>(1, n / min_chunk));
  if (num_chunks == 1 || impl_->workers.empty()) {
    fn(0, n);
    return;
  }
  Impl& s = *impl_;
  s.fn = &fn;
  s.n = n;
  s.num_chunks = num_chunks;
  s.next_chunk.store(0, std::memory_order_relaxed);
  s.pending.store(static_cast<int>(s.workers.size()), std::memory_order_relaxed);
  s.generation.fetch_add(1);  // seq_cst: publishes the job fields above
  if (s.sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.work_cv.notify_all();
  }
  s.RunChunks();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0; s.pending.load(std::memory_order_acquire) != 0; ++i) {
    CpuRelax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) {
      std::unique_lock<std::mutex> lock(s.mu);
      s.done_cv.wait(lock, [&] { return s.pending.load(std::memory_order_acquire) == 0; });
      break;
    }
  }
}

}  // namespace witcert
