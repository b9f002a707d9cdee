#include "gateway/flow_control.h"

#include <algorithm>
#include <cmath>

#include "absl/time/time.h"

namespace deepinfer::gateway {

Slot& Slot::operator=(Slot&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = other.owner_;
    backend_ = other.backend_;
    acquired_ = other.acquired_;
    other.owner_ = nullptr;
    other.backend_ = -1;
  }
  return *this;
}

void Slot::Release() {
  if (owner_ == nullptr) return;
  FlowControl* owner = owner_;
  owner_ = nullptr;
  owner->Release(backend_, std::chrono::duration<double>(Clock::now() - acquired_).count());
}

FlowControl::FlowControl(const FlowOptions& options, std::vector<std::string> names,
                         CounterStore* store)
    : options_(options),
      names_(std::move(names)),
      store_(store),
      eligible_(names_.size(), false),
      active_(names_.size(), 0) {}

void FlowControl::SetEligible(const std::vector<bool>& eligible, bool admission_open) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < eligible_.size() && i < eligible.size(); ++i) eligible_[i] = eligible[i];
  admission_open_ = admission_open;
  for (Waiter* w : queue_) {
    if (!w->assigned && !AnyEligibleLocked(w->exclude)) {
      w->failure = admission_open_ ? AdmitResult::kNoBackend : AdmitResult::kAdmissionClosed;
      w->cv.Signal();
    }
  }
  DispatchLocked(Clock::now());
}

int FlowControl::WaitingLocked() const {
  int n = 0;
  for (const Waiter* w : queue_) n += w->assigned || w->failure != AdmitResult::kOk ? 0 : 1;
  return n;
}

bool FlowControl::AnyEligibleLocked(int exclude) const {
  for (size_t i = 0; i < eligible_.size(); ++i) {
    if (eligible_[i] && static_cast<int>(i) != exclude) return true;
  }
  return false;
}

void FlowControl::CandidatesLocked(const Waiter& w, Clock::time_point now,
                                   std::vector<int>* out) const {
  out->clear();
  if (w.preferred >= 0 && w.preferred != w.exclude && eligible_[w.preferred] &&
      now < w.patience_until) {
    out->push_back(w.preferred);
    return;
  }
  const size_t n = eligible_.size();
  // Rotating the start spreads new sessions over equally loaded backends.
  for (size_t k = 0; k < n; ++k) {
    size_t i = (k + rotation_) % n;
    if (eligible_[i] && static_cast<int>(i) != w.exclude) out->push_back(static_cast<int>(i));
  }
  // The preferred backend (if still eligible) wins ties after the patience ran out.
  auto it = std::find(out->begin(), out->end(), w.preferred);
  if (it != out->end()) std::rotate(out->begin(), it, it + 1);
}

void FlowControl::DispatchLocked(Clock::time_point now) {
  last_dispatch_ = now;
  if (queue_.empty()) return;  // every release dispatches; most find no one waiting
  std::vector<bool>& full = full_;
  full.assign(names_.size(), false);
  std::vector<int>& candidates = candidates_;
  std::vector<std::string>& names = candidate_names_;
  for (Waiter* w : queue_) {
    if (w->assigned || w->failure != AdmitResult::kOk) continue;
    CandidatesLocked(*w, now, &candidates);
    // Drops the full ones, keeping the order (a loop: clang's analysis cannot see that a lambda
    // run by std::remove_if runs under mu_).
    size_t kept = 0;
    for (int b : candidates) {
      if (!full[b]) candidates[kept++] = b;
    }
    candidates.resize(kept);
    if (candidates.empty()) continue;
    // Assigned in place, the strings keep their capacity between dispatches.
    names.resize(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) names[i] = names_[candidates[i]];
    absl::StatusOr<int> chosen = store_->TryAcquire(names, options_.max_active_per_backend);
    if (!chosen.ok()) {
      w->failure = AdmitResult::kStateError;
      w->cv.Signal();
      continue;
    }
    if (*chosen < 0) {
      for (int b : candidates) full[b] = true;
      continue;
    }
    int b = candidates[*chosen];
    w->assigned = true;
    w->backend = b;
    active_[b]++;
    acquired_total_++;
    rotation_++;
    w->cv.Signal();
  }
}

AcquireResult FlowControl::Acquire(const AcquireRequest& request,
                                   const std::function<bool()>& cancelled) {
  AcquireResult out;
  const auto start = Clock::now();
  absl::MutexLock lock(&mu_);
  if (!AnyEligibleLocked(request.exclude)) {
    out.result = admission_open_ ? AdmitResult::kNoBackend : AdmitResult::kAdmissionClosed;
    return out;
  }
  Waiter w;
  w.preferred = request.preferred;
  w.exclude = request.exclude;
  w.patience_until = start + std::chrono::milliseconds(options_.affinity_patience_ms);
  queue_.push_back(&w);
  DispatchLocked(start);
  auto finish = [&](AdmitResult result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    queue_.remove(&w);
    out.result = result;
    out.waited_seconds =
        out.queued ? std::chrono::duration<double>(Clock::now() - start).count() : 0.0;
    if (w.assigned) {
      out.slot = Slot(this, w.backend);
      out.spilled = w.preferred >= 0 && w.backend != w.preferred && eligible_[w.preferred];
    }
    return std::move(out);
  };
  if (w.assigned) return finish(AdmitResult::kOk);
  if (w.failure != AdmitResult::kOk) return finish(w.failure);
  // Requests waiting ahead of this one, not counting it.
  if (WaitingLocked() - 1 >= options_.max_waiting) {
    return finish(AdmitResult::kQueueFull);
  }
  out.queued = true;
  const auto deadline = start + std::chrono::milliseconds(options_.queue_timeout_ms);
  bool patient = w.preferred >= 0;
  while (true) {
    auto now = Clock::now();
    auto wake = std::min(deadline, now + std::chrono::milliseconds(options_.wait_slice_ms));
    if (patient) wake = std::min(wake, w.patience_until);
    // One timed wait per slice: a spurious wake only polls the client early.
    w.cv.WaitWithTimeout(&mu_, absl::FromChrono(wake - now));
    if (w.assigned) return finish(AdmitResult::kOk);
    if (w.failure != AdmitResult::kOk) return finish(w.failure);
    mu_.Unlock();
    bool gone = cancelled && cancelled();
    mu_.Lock();
    if (w.assigned) return finish(AdmitResult::kOk);
    if (gone) return finish(AdmitResult::kCancelled);
    now = Clock::now();
    if (now >= deadline) return finish(AdmitResult::kQueueTimeout);
    bool patience_ended = patient && now >= w.patience_until;
    if (patience_ended) patient = false;
    // Locally every release dispatches; a shared store also has releases of other instances,
    // which only polling sees.
    bool poll_shared = store_->shared() && now - last_dispatch_ >= std::chrono::milliseconds(
                                                                       options_.wait_slice_ms / 2);
    if (patience_ended || poll_shared) DispatchLocked(now);
    if (w.assigned) return finish(AdmitResult::kOk);
    if (w.failure != AdmitResult::kOk) return finish(w.failure);
  }
}

void FlowControl::Release(int backend, double held_seconds) {
  absl::MutexLock lock(&mu_);
  store_->Release(names_[backend]);
  active_[backend]--;
  released_total_++;
  mean_hold_seconds_ = 0.9 * mean_hold_seconds_ + 0.1 * held_seconds;
  DispatchLocked(Clock::now());
}

FlowStats FlowControl::Stats() const {
  absl::MutexLock lock(&mu_);
  FlowStats stats;
  stats.waiting = WaitingLocked();
  stats.active = active_;
  stats.acquired_total = acquired_total_;
  stats.released_total = released_total_;
  return stats;
}

int FlowControl::RetryAfterSeconds() const {
  absl::MutexLock lock(&mu_);
  int capacity = 0;
  for (bool e : eligible_) capacity += e ? options_.max_active_per_backend : 0;
  if (capacity == 0) return 5;
  double seconds = mean_hold_seconds_ * (WaitingLocked() + 1.0) / capacity;
  return static_cast<int>(std::clamp(std::ceil(seconds), 1.0, 30.0));
}

}  // namespace deepinfer::gateway
