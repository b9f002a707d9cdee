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
    pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    }, 4);
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
