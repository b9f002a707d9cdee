#pragma once

// Shared flow control: at most `max_active_per_backend` requests in flight on each backend, one
// FIFO wait queue of at most `max_waiting` requests with a timeout, and session affinity with a
// short patience window. A slot is an RAII object: it goes back on every path (success, error,
// client gone, backend gone), and the acquired/released totals prove it.
//
// Source: ../shared/research/gateway-anchors.md sections 2 (slot leaks, stale load signals) and
//   4 (flow control): counts are updated synchronously at dispatch, never scraped.

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gateway/state.h"
#include "http/socket_io.h"

namespace deepinfer::gateway {

using http::Clock;

struct FlowOptions {
  int max_active_per_backend = 32;
  int max_waiting = 32;
  int queue_timeout_ms = 5000;
  // How long a bound session waits for its own full backend before spilling to another.
  int affinity_patience_ms = 500;
  // How often a waiter looks at its client (and, with shared state, at other instances'
  // releases). Units: ms.
  int wait_slice_ms = 20;
};

enum class AdmitResult {
  kOk,
  kQueueFull,        // 429 queue_full
  kQueueTimeout,     // 429 queue_timeout
  kNoBackend,        // 503 no_healthy_backend
  kAdmissionClosed,  // 503 admission_closed
  kCancelled,        // the client left while queued
  kStateError,       // 503 shared_state_unavailable
};

class FlowControl;

// One backend slot. Move-only; released by its destructor or Release().
// Lifetime: must not outlive the FlowControl that issued it.
class Slot {
 public:
  Slot() = default;
  Slot(FlowControl* owner, int backend) : owner_(owner), backend_(backend) {}
  Slot(Slot&& other) noexcept { *this = std::move(other); }
  Slot& operator=(Slot&& other) noexcept;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() { Release(); }

  bool valid() const { return owner_ != nullptr; }
  int backend() const { return backend_; }
  void Release();

 private:
  FlowControl* owner_ = nullptr;
  int backend_ = -1;
  Clock::time_point acquired_ = Clock::now();
};

struct AcquireRequest {
  int preferred = -1;  // the session's bound backend, or -1
  int exclude = -1;    // a backend not to use (it just refused a connection), or -1
};

struct AcquireResult {
  AdmitResult result = AdmitResult::kOk;
  Slot slot;
  double waited_seconds = 0;
  bool queued = false;   // waited in the queue at all
  bool spilled = false;  // served by a backend other than the preferred one (still eligible)
};

struct FlowStats {
  int waiting = 0;
  std::vector<int> active;  // this instance's slots per backend
  uint64_t acquired_total = 0;
  uint64_t released_total = 0;
};

// Threads: all methods are thread-safe; Acquire blocks its caller while queued.
class FlowControl {
 public:
  // `names` are the counter names of the backends in `store` ("backend:<url>").
  FlowControl(const FlowOptions& options, std::vector<std::string> names, CounterStore* store);

  // Which backends take new requests (healthy and admitted). `admission_open` tells the 503
  // reason when none does. Queued requests whose every backend left fail at once.
  void SetEligible(const std::vector<bool>& eligible, bool admission_open);

  // Takes a slot, waiting in the FIFO queue when every candidate backend is full. `cancelled`
  // is polled every wait slice (without the lock held); true ends the wait with kCancelled.
  AcquireResult Acquire(const AcquireRequest& request, const std::function<bool()>& cancelled);

  FlowStats Stats() const;
  // A Retry-After hint for rejected requests: the expected time for the queue ahead to drain,
  // from the mean slot hold time. Units: seconds, within [1, 30].
  int RetryAfterSeconds() const;
  const FlowOptions& options() const { return options_; }

 private:
  friend class Slot;
  // One queued Acquire, on its caller's stack. Its fields are under FlowControl::mu_ (clang
  // cannot name the outer class's mutex in the nested struct, so they carry no annotation).
  struct Waiter {
    int preferred = -1;
    int exclude = -1;
    Clock::time_point patience_until;
    bool assigned = false;
    int backend = -1;
    AdmitResult failure = AdmitResult::kOk;
    absl::CondVar cv;  // assigned or failed
  };

  void Release(int backend, double held_seconds);
  // Hands free slots to waiters in FIFO order.
  void DispatchLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills `out` with the backends `w` may take, in preference order.
  void CandidatesLocked(const Waiter& w, Clock::time_point now, std::vector<int>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AnyEligibleLocked(int exclude) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waiters not yet served or failed.
  int WaitingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FlowOptions options_;
  const std::vector<std::string> names_;
  CounterStore* const store_;
  mutable absl::Mutex mu_;
  std::vector<bool> eligible_ ABSL_GUARDED_BY(mu_);
  bool admission_open_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Waiter*> queue_ ABSL_GUARDED_BY(mu_);
  // DispatchLocked's working space, kept so that dispatching allocates nothing once warm.
  std::vector<bool> full_ ABSL_GUARDED_BY(mu_);
  std::vector<int> candidates_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> candidate_names_ ABSL_GUARDED_BY(mu_);
  std::vector<int> active_ ABSL_GUARDED_BY(mu_);
  uint64_t acquired_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t released_total_ ABSL_GUARDED_BY(mu_) = 0;
  // Spreads ties between equally loaded backends.
  uint64_t rotation_ ABSL_GUARDED_BY(mu_) = 0;
  double mean_hold_seconds_ ABSL_GUARDED_BY(mu_) = 1.0;
  Clock::time_point last_dispatch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace deepinfer::gateway
