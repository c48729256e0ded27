// ThreadPool: coverage (every index exactly once), chunk geometry, repeated dispatch,
// sleep/wake cycles and shutdown.
#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace witcert {
namespace {

TEST(ThreadPoolTest, ReportsThreadCount) {
  EXPECT_EQ(ThreadPool(1).num_threads(), 1);
  EXPECT_EQ(ThreadPool(3).num_threads(), 3);
  EXPECT_EQ(ThreadPool(0).num_threads(),
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(ThreadPoolTest, CoversEveryIndexOnceWithContiguousEvenChunks) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
      for (int64_t min_chunk : {1, 3, 50, 2000}) {
        SCOPED_TRACE(testing::Message() << threads << " threads n=" << n << " min=" << min_chunk);
        std::vector<std::atomic<int>> hits(n);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        pool.ParallelFor(n, min_chunk, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          chunks.emplace_back(b, e);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
        if (n == 0) {
          EXPECT_TRUE(chunks.empty());
          continue;
        }
        // At most a few chunks per thread, and never one below min_chunk (unless n is).
        EXPECT_LE(static_cast<int>(chunks.size()), 4 * threads);
        std::sort(chunks.begin(), chunks.end());
        EXPECT_EQ(chunks.front().first, 0);
        EXPECT_EQ(chunks.back().second, n);
        int64_t lo = n, hi = 0;
        for (size_t c = 0; c < chunks.size(); ++c) {
          if (c > 0) {
            EXPECT_EQ(chunks[c].first, chunks[c - 1].second);
          }
          const int64_t len = chunks[c].second - chunks[c].first;
          lo = std::min(lo, len);
          hi = std::max(hi, len);
          if (chunks.size() > 1) {
            EXPECT_GE(len, min_chunk);
          }
        }
        EXPECT_LE(hi - lo, 1) << "chunks not even";
      }
    }
  }
}

TEST(ThreadPoolTest, ManyBackToBackDispatchesStayCorrect) {
  ThreadPool pool(3);
  std::vector<int64_t> data(600);  // [600]
  for (int iter = 0; iter < 20000; ++iter) {
    pool.ParallelFor(static_cast<int64_t>(data.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[i] += i;
    });
  }
  for (int64_t i = 0; i < static_cast<int64_t>(data.size()); ++i) ASSERT_EQ(data[i], 20000 * i);
}

TEST(ThreadPoolTest, WakesSleepingWorkersAndShutsDownWhileIdle) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int iter = 0; iter < 5; ++iter) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers go to sleep
    pool.ParallelFor(3000, 1, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  }
  EXPECT_EQ(total.load(), 15000);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Destructor runs with every worker asleep: must join, not hang.
}

TEST(ThreadPoolTest, UsesMoreThanOneThreadForLargeLoops) {
  ThreadPool pool(2);
  std::mutex mu;
  std::vector<std::thread::id> ids;
  // Both chunks wait for each other briefly, so one thread cannot take both in sequence
  // unless the second participant never shows up (then the deadline lets it finish).
  std::atomic<int> arrived{0};
  pool.ParallelFor(2, 1, [&](int64_t, int64_t) {
    arrived.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    std::lock_guard<std::mutex> lock(mu);
    ids.push_back(std::this_thread::get_id());
  });
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
}

}  // namespace
}  // namespace witcert
