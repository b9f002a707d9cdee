#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace deepinfer::util {

// A fixed set of worker threads for data-parallel model math.
//
// ParallelFor splits [0, n) into a few contiguous tasks per thread, taken dynamically (the caller
// is thread 0 and always takes part), and returns when all are done. Workers spin briefly between
// calls, then sleep, because decode issues hundreds of small parallel regions per token and a
// futex wake per region would dominate.
//
// Threads: ParallelFor must be called from one thread at a time (the owner, typically the engine
//   thread); it is not reentrant.
// Lifetime: joins its workers in the destructor.
class ThreadPool {
 public:
  // `num_threads` counts the caller; 1 means no workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_index) on disjoint ranges covering [0, n), using up to
  // num_threads() threads; each range is a multiple of `grain` except the last. A thread may
  // receive several ranges; thread_index identifies the calling thread (for per-thread scratch).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                   int64_t grain = 1);

  // Calls fn(i, num_threads()) exactly once for every i in [0, num_threads()), spread over the
  // threads that are running (one OS thread may run several indices). For static partitions;
  // per-OS-thread state must use thread_local, not i.
  void RunOnAll(const std::function<void(int, int)>& fn);

 private:
  // Runs fn(thread_index, num_threads) on the caller and on each worker that joins before the
  // caller's own call returns; a descheduled worker may miss the job.
  void RunJob(const std::function<void(int, int)>& fn);
  void WorkerLoop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> closed_{true};
  std::atomic<bool> stop_{false};
  // Only for sleeping workers: mu_ guards no member (the job protocol is the atomics above);
  // bumping generation_ under it orders the bump with a sleeper's check before it waits on cv_.
  absl::Mutex mu_;
  absl::CondVar cv_;  // generation_ moved (a new job, or stop)
};

}  // namespace deepinfer::util
