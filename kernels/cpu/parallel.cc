// ThreadPool: N-1 workers plus the calling thread, sharing chunks through one atomic word.
//
// Why this shape: a decode step issues a few hundred ParallelFor calls of 10-100 µs each on
// a machine whose cores are often shared, so (1) dispatch must not cost a condition-variable
// round trip — workers wait on the job word (spin, then yield, see (3)) before sleeping, and
// the caller touches the mutex only when a worker is asleep; (2) the caller must never wait for a
// worker that has not started: the loop is cut into up to kChunksPerThread·N contiguous
// chunks that every participant claims from the shared word, so a descheduled worker's
// share is simply taken by whoever is running. Which thread runs a chunk never changes its
// result, so outputs do not depend on the thread count. (3) A waiting thread spins kSpinMicros,
// then yields the core for up to kYieldMicros, and only then sleeps: on a machine shared with
// the HTTP threads and the clients, a yield lets them run without the futex sleep and wake-up
// that a sleep would cost on the next loop (measured in bench/RESULTS.md, 2026-12-02).
//
// Memory ordering: `job` packs (num_chunks << 32 | next_chunk). The caller writes fn/n and
// resets `done`, then publishes `job` (seq_cst store, a release). A participant owns chunk k
// only after a successful CAS next k → k+1 on the current word (acq_rel: it synchronizes
// with the publication), then reads fn/n; those stay valid until `done` reaches num_chunks, which
// cannot happen before its own chunk is finished. A participant holding an old word value simply
// fails its CAS.
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
constexpr int64_t kYieldMicros = 1000;  // from the start of the wait
constexpr int64_t kChunksPerThread = 4;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// One wait: Step() spins, then yields; it returns false once the waiter should block.
class Backoff {
 public:
  bool Step() {
    using std::chrono::microseconds;
    if (!yielding_) {
      CpuRelax();
      if ((++spins_ & 63) == 0 && Clock::now() - start_ > microseconds(kSpinMicros)) {
        yielding_ = true;
      }
      return true;
    }
    std::this_thread::yield();
    return Clock::now() - start_ <= microseconds(kYieldMicros);
  }

 private:
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start_ = Clock::now();
  uint32_t spins_ = 0;
  bool yielding_ = false;
};

inline bool HasWork(uint64_t word) {
  return static_cast<uint32_t>(word) < static_cast<uint32_t>(word >> 32);
}

}  // namespace

struct ThreadPool::Impl {
  int num_threads = 1;
  std::vector<std::thread> workers;

  std::mutex mu;
  std::condition_variable work_cv;  // workers sleep here until HasWork(job) or stop
  std::condition_variable done_cv;  // the caller sleeps here until done == num_chunks
  std::atomic<uint64_t> job{0};     // num_chunks << 32 | next_chunk
  std::atomic<int64_t> done{0};     // chunks finished in the current job
  std::atomic<int> sleepers{0};
  std::atomic<bool> caller_sleeping{false};
  std::atomic<bool> stop{false};

  // Current job, written by the caller before publishing `job`.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;

  // Claims and runs chunks until none are left.
  void RunChunks() {
    uint64_t word = job.load(std::memory_order_relaxed);
    while (HasWork(word)) {
      if (!job.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                     std::memory_order_relaxed)) {
        continue;  // `word` now holds the fresh value
      }
      const int64_t total = static_cast<int64_t>(word >> 32);
      const int64_t c = static_cast<uint32_t>(word);
      // Even split: chunk c covers [c·n/total, (c+1)·n/total).
      (*fn)(c * n / total, (c + 1) * n / total);
      if (done.fetch_add(1) + 1 == total &&  // seq_cst: pairs with caller_sleeping
          caller_sleeping.load()) {
        std::lock_guard<std::mutex> lock(mu);  // orders the notify after the caller's check
        done_cv.notify_one();
      }
      word = job.load(std::memory_order_relaxed);
    }
  }

  void WorkerLoop() {
    for (;;) {
      for (Backoff wait; !HasWork(job.load()) && !stop.load();) {
        if (!wait.Step()) {
          std::unique_lock<std::mutex> lock(mu);
          sleepers.fetch_add(1);
          work_cv.wait(lock, [&] { return HasWork(job.load()) || stop.load(); });
          sleepers.fetch_sub(1);
          break;
        }
      }
      if (stop.load()) return;
      RunChunks();
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
      std::min<int64_t>(kChunksPerThread * impl_->num_threads, std::max<int64_t>(1, n / min_chunk));
  if (num_chunks == 1 || impl_->workers.empty()) {
    fn(0, n);
    return;
  }
  Impl& s = *impl_;
  s.fn = &fn;
  s.n = n;
  s.done.store(0, std::memory_order_relaxed);
  s.job.store(static_cast<uint64_t>(num_chunks) << 32);  // seq_cst: publishes fn, n, done
  if (s.sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.work_cv.notify_all();
  }
  s.RunChunks();
  for (Backoff wait; s.done.load(std::memory_order_acquire) != num_chunks;) {
    if (!wait.Step()) {
      std::unique_lock<std::mutex> lock(s.mu);
      s.caller_sleeping.store(true);
      s.done_cv.wait(lock, [&] { return s.done.load() == num_chunks; });
      s.caller_sleeping.store(false);
      break;
    }
  }
}

}  // namespace witcert
