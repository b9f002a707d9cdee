#include "util/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::util {
namespace {

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 7, 64, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(
        n,
        [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        },
        4);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, ManySmallRegionsComplete) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 20000; ++r) {
    pool.ParallelFor(2, [&](int64_t b, int64_t e, int) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 40000);
}

}  // namespace
}  // namespace deepinfer::util

namespace deepinfer::util {
namespace {

TEST(ThreadPoolTest, RunOnAllRunsEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 2000; ++rep) {
    std::vector<std::atomic<int>> hits(4);
    pool.RunOnAll([&](int i, int n) {
      EXPECT_EQ(n, 4);
      hits[i]++;
    });
    for (int i = 0; i < 4; ++i) ASSERT_EQ(hits[i].load(), 1);
  }
}

TEST(ThreadPoolTest, MoreThreadsThanCoresStillCompletesQuickly) {
  // Oversubscription deschedules workers; the caller must finish the work without them.
  ThreadPool pool(16);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 3000; ++r) {
    pool.ParallelFor(64, [&](int64_t b, int64_t e, int) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 64 * 3000);
}

}  // namespace
}  // namespace deepinfer::util
