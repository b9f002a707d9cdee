#pragma once

// The pool's backends: their addresses and health. A backend is named by its normalized URL
// everywhere (admission file, bindings, metrics, status), so that adding a backend renames
// nothing and moves no session.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "http/url.h"

namespace deepinfer::gateway {

// A backend's address; its origin() ("http://host:port", no trailing slash) is its name.
using BackendAddress = http::Url;

// Parses "http://host:port" as http::ParseUrl does (case ignored, IPv6 in brackets, no https:
// backends are reached over loopback or SSH tunnels), with no path ("/" allowed).
// "http://HOST" means port 80.
// Errors: InvalidArgument "bad_backend_url" ("Bad backend URL 'URL': why").
absl::StatusOr<BackendAddress> ParseBackendUrl(std::string_view url);

struct HealthOptions {
  int failure_threshold = 3;  // consecutive failed probes that make a backend unhealthy
  int success_threshold = 2;  // consecutive good probes that make it healthy again
};

struct BackendHealth {
  bool healthy = true;
  int consecutive_failures = 0;
  int consecutive_successes = 0;
  std::string last_error;    // "" when the last probe succeeded
  int64_t changed_unix = 0;  // when `healthy` last changed; Units: seconds since the epoch
  uint64_t ejections = 0;    // times marked unhealthy
};

// Health of every backend: a state machine fed by active probes and by connection failures seen
// while proxying.
// Threads: all methods are thread-safe.
class BackendTable {
 public:
  BackendTable(std::vector<BackendAddress> backends, HealthOptions options);

  size_t size() const { return backends_.size(); }
  const BackendAddress& address(size_t i) const { return backends_[i]; }
  const std::vector<BackendAddress>& addresses() const { return backends_; }
  // Index of the backend with normalized `url`, or -1.
  int IndexOf(std::string_view url) const;

  // Records one probe. A connection failure (refused, reset, unreachable) ejects at once; other
  // failures (timeout, non-200) count toward the failure threshold. Returns true when the
  // backend's health changed.
  bool RecordProbe(size_t i, bool ok, bool connection_failure, const std::string& error,
                   int64_t now_unix);
  // Marks a backend unhealthy at once (a failed connect while proxying). Returns true when its
  // health changed.
  bool Eject(size_t i, const std::string& error, int64_t now_unix);

  bool healthy(size_t i) const;
  std::vector<bool> HealthyMask() const;
  std::vector<BackendHealth> Snapshot() const;

  // The backend-state file: {"version":1,"backends":[{"url","healthy","consecutive_failures",
  // "last_error","changed_unix","ejections"}]}.
  std::string SerializeState() const;
  // Seeds health from an earlier backend-state file; entries for unknown URLs are ignored.
  // Errors: InvalidArgument "bad_backend_state".
  absl::Status LoadState(std::string_view text);

 private:
  const std::vector<BackendAddress> backends_;
  const HealthOptions options_;
  mutable absl::Mutex mu_;
  std::vector<BackendHealth> health_ ABSL_GUARDED_BY(mu_);
};

}  // namespace deepinfer::gateway
