#pragma once

// Where the gateway's shared state lives: concurrency counters (per-backend slots, per-key
// limits) and session bindings. The embedded default keeps them in this process (bindings also
// in an atomically written file); with --state redis://... they live in Redis so that several
// gateway instances in front of one pool keep one set of limits (see redis_state.h).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace deepinfer::gateway {

// Named counters with a cap, taken and given back one unit at a time.
// Threads: implementations are thread-safe.
class CounterStore {
 public:
  virtual ~CounterStore() = default;

  // Among `names` (in preference order) takes one unit of the least-used one that is below
  // `cap`; ties go to the earlier name. Returns its index in `names`, or -1 when all are full.
  // Errors: Unavailable "shared_state_unavailable" when the store cannot be reached.
  virtual absl::StatusOr<int> TryAcquire(const std::vector<std::string>& names, int cap) = 0;
  // Gives back one unit taken by this process. Never fails: a shared store that cannot be
  // reached is corrected by the next reconciliation.
  virtual void Release(const std::string& name) = 0;
  // Units in use now (by every instance, for a shared store).
  virtual absl::StatusOr<int64_t> Total(const std::string& name) = 0;
  virtual bool shared() const { return false; }
};

// The embedded default: counters of this process only.
class LocalCounterStore : public CounterStore {
 public:
  absl::StatusOr<int> TryAcquire(const std::vector<std::string>& names, int cap) override;
  void Release(const std::string& name) override;
  absl::StatusOr<int64_t> Total(const std::string& name) override;

 private:
  absl::Mutex mu_;
  std::unordered_map<std::string, int64_t> counts_ ABSL_GUARDED_BY(mu_);
};

// Session id -> backend URL, with an idle time-to-live.
// Threads: implementations are thread-safe.
class BindingStore {
 public:
  virtual ~BindingStore() = default;

  // The backend bound to `session`, refreshing its idle timer; nullopt when unbound or expired.
  // Units: now_ms in milliseconds since the epoch.
  // Errors: Unavailable "shared_state_unavailable".
  virtual absl::StatusOr<std::optional<std::string>> Lookup(const std::string& session,
                                                            int64_t now_ms) = 0;
  // Binds an unbound session. When another request (or instance) bound it first, keeps that
  // binding and returns it; otherwise returns `backend_url`.
  virtual absl::StatusOr<std::string> BindIfAbsent(const std::string& session,
                                                   const std::string& backend_url,
                                                   int64_t now_ms) = 0;
  // Moves a session whose backend left (unhealthy or not admitted) to `backend_url`.
  virtual absl::Status Rebind(const std::string& session, const std::string& backend_url,
                              int64_t now_ms) = 0;
  // Bindings per backend URL (local view; for status and metrics).
  virtual std::map<std::string, int64_t> CountByBackend() = 0;
  // Periodic work (expiry, persistence). Units: now_ms as above.
  virtual void Maintain(int64_t now_ms) {}
  // Writes pending changes now (at shutdown).
  virtual void Flush(int64_t now_ms) {}
};

// The embedded default: an in-memory table, written to `path` (when not empty) atomically at
// most once per second after a binding changes, and at least every 30 s while sessions are used.
// File: {"version":1,"bindings":[{"session","backend","last_used_ms"}]}; session ids are
// already hashed (request_info.h), so the file holds no user identifiers.
class LocalBindingStore : public BindingStore {
 public:
  // Units: ttl_ms milliseconds; max_entries bounds memory (the least recently used go first).
  LocalBindingStore(std::string path, int64_t ttl_ms, size_t max_entries);

  // Loads the file when it exists. Errors: InvalidArgument "bad_bindings_file".
  absl::Status Load(int64_t now_ms);

  absl::StatusOr<std::optional<std::string>> Lookup(const std::string& session,
                                                    int64_t now_ms) override;
  absl::StatusOr<std::string> BindIfAbsent(const std::string& session,
                                           const std::string& backend_url, int64_t now_ms) override;
  absl::Status Rebind(const std::string& session, const std::string& backend_url,
                      int64_t now_ms) override;
  std::map<std::string, int64_t> CountByBackend() override;
  void Maintain(int64_t now_ms) override;
  void Flush(int64_t now_ms) override;

  size_t size();
  // The file's contents for the current table.
  std::string Serialize();

 private:
  struct Entry {
    std::string backend;
    int64_t last_used_ms = 0;
  };
  void EvictLocked(int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Write();

  const std::string path_;
  const int64_t ttl_ms_;
  const size_t max_entries_;
  absl::Mutex mu_;
  std::unordered_map<std::string, Entry> table_ ABSL_GUARDED_BY(mu_);
  // A binding was added, moved or removed since the last write.
  bool changed_ ABSL_GUARDED_BY(mu_) = false;
  bool touched_ ABSL_GUARDED_BY(mu_) = false;  // a binding was used since the last write
  int64_t last_write_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace deepinfer::gateway
