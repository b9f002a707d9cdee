#include "util/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#define DI_PAUSE() _mm_pause()
#else
#define DI_PAUSE() ((void)0)
#endif

namespace deepinfer::util {
namespace {
// About 50-100 us of spinning: longer than the gap between two matmuls of one decode step,
// shorter than a scheduler tick, so idle servers do not burn a core.
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      DI_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index, num_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::RunOnAll(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  {
    // Taking the lock orders the generation bump with sleepers' predicate checks.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  fn(0, num_threads_);
  while (pending_.load(std::memory_order_acquire) != 0) DI_PAUSE();
  job_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                             int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t num_chunks = (n + grain - 1) / grain;
  int threads = static_cast<int>(std::min<int64_t>(num_threads_, num_chunks));
  if (threads <= 1) {
    fn(0, n, 0);
    return;
  }
  RunOnAll([&](int t, int) {
    if (t >= threads) return;
    int64_t c0 = num_chunks * t / threads;
    int64_t c1 = num_chunks * (t + 1) / threads;
    int64_t b = c0 * grain, e = std::min(n, c1 * grain);
    if (b < e) fn(b, e, t);
  });
}

}  // namespace deepinfer::util
