#pragma once

// Shared state in Redis (--state redis://HOST:PORT[/DB]) for several gateway instances in front
// of one pool: one set of per-backend and per-key counters and one table of session bindings.
//
// Counters survive a crashed instance: each counter is a hash with one field per instance
// ("<prefix>c:<name>" -> {instance id: units}), and only instances whose liveness key
// ("<prefix>i:<id>", refreshed every second with a 5 s expiry) exists are counted, so the units
// of a dead instance vanish within 5 s instead of wedging the pool at its limit. Every second
// each instance also rewrites its own fields from its local truth, which repairs any release
// lost while Redis was unreachable. Takes run as one Lua script (check and increment at once).
// Bindings are plain keys "<prefix>b:<session>" with an idle expiry (GETEX refreshes it).
// Single-node Redis (the script reads liveness keys it is not passed in KEYS).

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gateway/state.h"

struct redisContext;

namespace deepinfer::gateway {

struct RedisValue {
  enum class Type { kNil, kInteger, kString, kArray, kStatus, kError };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string text;  // string, status or error text
  std::vector<RedisValue> elements;
};

// One connection, one command at a time, reconnecting once when the connection broke.
// Threads: thread-safe (a mutex around the connection).
class RedisClient {
 public:
  // Parses redis://HOST:PORT[/DB] and connects.
  // Errors: InvalidArgument "bad_state_url"; Unavailable "shared_state_unavailable".
  static absl::StatusOr<std::unique_ptr<RedisClient>> Connect(std::string_view url, int timeout_ms);
  ~RedisClient();

  // Errors: Unavailable "shared_state_unavailable" (connection), Internal "redis_error" (an
  // error reply).
  absl::StatusOr<RedisValue> Command(const std::vector<std::string>& args);

 private:
  RedisClient(std::string host, int port, int db, int timeout_ms)
      : host_(std::move(host)), port_(port), db_(db), timeout_ms_(timeout_ms) {}
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string host_;
  const int port_;
  const int db_;
  const int timeout_ms_;
  absl::Mutex mu_;
  redisContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// Counters shared by every instance using the same Redis and prefix.
// Threads: thread-safe. Lifetime: starts a heartbeat thread; the destructor removes this
// instance's units and liveness key.
class RedisCounterStore : public CounterStore {
 public:
  RedisCounterStore(RedisClient* client, std::string prefix);
  ~RedisCounterStore() override;

  absl::StatusOr<int> TryAcquire(const std::vector<std::string>& names, int cap) override;
  void Release(const std::string& name) override;
  absl::StatusOr<int64_t> Total(const std::string& name) override;
  bool shared() const override { return true; }

  const std::string& instance_id() const { return instance_id_; }
  // Refreshes the liveness key and rewrites this instance's fields (the heartbeat's work).
  absl::Status Heartbeat();

 private:
  void HeartbeatLoop();

  RedisClient* const client_;
  const std::string prefix_;
  const std::string instance_id_;
  absl::Mutex mu_;  // serializes takes, releases and heartbeats so local and shared agree
  std::map<std::string, int64_t> local_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  // Only for the heartbeat's wait: set stop_ under it, then signal, so the wait cannot miss it.
  absl::Mutex stop_mu_;
  absl::CondVar stop_cv_;
  std::thread heartbeat_;
};

// Session bindings shared by every instance.
// Threads: thread-safe.
class RedisBindingStore : public BindingStore {
 public:
  RedisBindingStore(RedisClient* client, std::string prefix, int64_t ttl_ms);

  absl::StatusOr<std::optional<std::string>> Lookup(const std::string& session,
                                                    int64_t now_ms) override;
  absl::StatusOr<std::string> BindIfAbsent(const std::string& session,
                                           const std::string& backend_url, int64_t now_ms) override;
  absl::Status Rebind(const std::string& session, const std::string& backend_url,
                      int64_t now_ms) override;
  // Bindings made or used by this instance (Redis holds the full table).
  std::map<std::string, int64_t> CountByBackend() override { return {}; }

 private:
  RedisClient* const client_;
  const std::string prefix_;
  const int64_t ttl_ms_;
};

// Whether this build has Redis support (libhiredis).
bool RedisSupported();

}  // namespace deepinfer::gateway
