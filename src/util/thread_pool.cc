#include "util/thread_pool.h"

#include <sched.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#define DI_PAUSE() _mm_pause()
#else
#define DI_PAUSE() ((void)0)
#endif

namespace deepinfer::util {
namespace {
// Spinning bridges the short gaps between the parallel regions of one decode step; after that
// a worker sleeps so an idle server does not burn a core.
constexpr int kSpinIterations = 4000;
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.SignalAll();
  for (auto& t : workers_) t.join();
}

// Joining protocol: the owner opens a job by publishing job_ and bumping generation_, runs its
// share, then closes the job and waits until no worker is inside it. A worker enters by
// incrementing active_ and re-checking that the job it saw is still open; all operations are
// sequentially consistent, so a worker that enters after the owner has seen active_ == 0 always
// sees the job closed and backs out. The owner therefore never waits for a worker that was
// descheduled before it started: the remaining tasks are taken by whoever is running.
void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t gen = generation_.load();
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      DI_PAUSE();
      gen = generation_.load();
    }
    if (gen == seen) {
      absl::MutexLock lock(&mu_);
      while (generation_.load() == seen) cv_.Wait(&mu_);
      gen = generation_.load();
    }
    seen = gen;
    if (stop_.load()) return;
    active_.fetch_add(1);
    if (!closed_.load() && generation_.load() == gen) (*job_)(index, num_threads_);
    active_.fetch_sub(1);
  }
}

void ThreadPool::RunJob(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  closed_.store(false);
  {
    // Taking the lock orders the generation bump with sleepers' predicate checks. With no
    // sleeper (workers spinning between the regions of a decode step) Lock and Unlock are one
    // uncontended atomic operation each and SignalAll one load, as a std::mutex and a
    // std::condition_variable would cost (measured: docs/engine.md, "Locking").
    absl::MutexLock lock(&mu_);
    generation_.fetch_add(1);
  }
  cv_.SignalAll();
  fn(0, num_threads_);
  closed_.store(true);
  for (int spin = 0; active_.load() != 0; ++spin) {
    if (spin < kSpinIterations) {
      DI_PAUSE();
    } else {
      sched_yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                             int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t num_chunks = (n + grain - 1) / grain;
  if (num_threads_ == 1 || num_chunks == 1) {
    fn(0, n, 0);
    return;
  }
  // A few tasks per thread, taken dynamically: a thread that is descheduled (or slower) leaves
  // its share to the others instead of stalling the whole region.
  struct Job {
    const std::function<void(int64_t, int64_t, int)>* fn;
    int64_t n, grain, num_chunks, num_tasks;
    std::atomic<int64_t> next{0};
  } job{&fn, n, grain, num_chunks, std::min<int64_t>(num_chunks, int64_t{num_threads_} * 4)};
  // One captured pointer keeps the std::function inline: no allocation per parallel region.
  Job* j = &job;
  RunJob([j](int t, int) {
    while (true) {
      int64_t task = j->next.fetch_add(1, std::memory_order_relaxed);
      if (task >= j->num_tasks) return;
      int64_t c0 = j->num_chunks * task / j->num_tasks;
      int64_t c1 = j->num_chunks * (task + 1) / j->num_tasks;
      int64_t b = c0 * j->grain, e = std::min(j->n, c1 * j->grain);
      if (b < e) (*j->fn)(b, e, t);
    }
  });
}

}  // namespace deepinfer::util

namespace deepinfer::util {

void ThreadPool::RunOnAll(const std::function<void(int, int)>& fn) {
  // Logical indices are handed out like tasks, so each runs exactly once even if a worker
  // misses the job.
  struct Job {
    const std::function<void(int, int)>* fn;
    int n;
  } job{&fn, num_threads_};
  Job* j = &job;
  ParallelFor(num_threads_, [j](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) (*j->fn)(static_cast<int>(i), j->n);
  });
}

}  // namespace deepinfer::util
