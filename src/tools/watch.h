#pragma once

// `deepinfer watch`: idle recovery for one exact instance (a rendered launch script, its sha256,
// the binary's sha256, the port). It samples the instance and then a device-idle probe, one at a
// time, at a jittered interval, and restarts the instance only when all of these hold:
//   - it is not running;
//   - its last exit was a crash (the launch script records every exit: a clean exit or a stop
//     signal such as TERM, INT, HUP, KILL or QUIT is an operator's stop and stays stopped; no
//     record at all is an unknown and also stays stopped);
//   - no operator stopped it on purpose with `deepinfer watch stop`;
//   - the launch script and binary still hash to the bound values;
//   - the machine was idle at every sample, without gaps, for `idle_hours`.
// Every change of the instance's state goes to a notification hook once (duplicates suppressed).
// State is written atomically after every sample.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace deepinfer::tools {

// The binding written by `deepinfer render --instance-file`.
struct WatchInstance {
  std::string name;
  std::string script;
  std::string script_sha256;
  std::string binary;
  std::string binary_sha256;
  int32_t port = 0;
  std::string artifacts;
  std::string launcher;  // "plain" or "docker"
};

// Errors: InvalidArgument "bad_instance".
absl::StatusOr<WatchInstance> ParseWatchInstance(std::string_view text);

// Wall-clock time for the watcher. Tests substitute a clock read from a file.
// Units: seconds since the Unix epoch.
class WatchClock {
 public:
  virtual ~WatchClock() = default;
  virtual double Now() = 0;
  // Returns when Now() >= t or `*stop` became true.
  virtual void SleepUntil(double t, const volatile bool* stop) = 0;
};
std::unique_ptr<WatchClock> RealWatchClock();
// Reads the time from `path` (a decimal number of seconds) at every call; sleeping polls it.
std::unique_ptr<WatchClock> FileWatchClock(const std::string& path);

struct WatchOptions {
  std::string state_path;  // default: <instance file>.watch.json
  double idle_hours = 2;
  double interval_s = 60;
  double jitter = 0.2;           // the interval varies by +-jitter of itself
  std::string idle_probe;        // shell command: exit 0 idle, 1 busy, else unknown;
                                 // default: bash <script> probe-idle
  std::string notify;            // shell command; event in DEEPINFER_WATCH_EVENT, text in
                                 // DEEPINFER_WATCH_MESSAGE, instance in DEEPINFER_WATCH_INSTANCE
  double probe_timeout_s = 120;  // idle probe and notify hook each
};

// What one sample found and did.
struct WatchSample {
  double time = 0;
  std::string state;  // running, unhealthy, stopped_by_operator, stopped, stopped_unknown,
                      // crashed_waiting, binding_changed, restarted, probe_failed
  std::string message;
  bool idle = false;
  std::optional<double> idle_since;
  bool restarted = false;
  bool notified = false;
};

// One watcher bound to one instance.
//
// Threads: one thread.
// Lifetime: holds an exclusive lock on <state>.lock while it lives, so two watchers never
//   drive one instance.
class Watcher {
 public:
  // Errors: InvalidArgument "bad_instance"; FailedPrecondition "watch_locked" when another
  //   watcher holds the lock; Internal "io_error" for unreadable state.
  static absl::StatusOr<std::unique_ptr<Watcher>> Create(const std::string& instance_path,
                                                         const WatchOptions& options,
                                                         std::unique_ptr<WatchClock> clock);
  ~Watcher();

  // Samples once, decides, notifies, writes the state file.
  absl::StatusOr<WatchSample> SampleOnce();

  // Samples until `*stop` becomes true, sleeping a jittered interval between samples.
  absl::Status Run(const volatile bool* stop, bool print);

 private:
  struct Impl;
  explicit Watcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `deepinfer watch stop`: records the operator's stop (so the watcher never restarts the
// instance), then sends SIGTERM to a running instance and waits up to `wait_s` for it to exit.
// Returns a one-line description of what happened.
absl::StatusOr<std::string> WatchStop(const std::string& instance_path,
                                      const std::string& state_path, double wait_s,
                                      WatchClock& clock);
// `deepinfer watch resume`: removes the stop record (starts nothing).
absl::StatusOr<std::string> WatchResume(const std::string& instance_path,
                                        const std::string& state_path);

// The default state path of an instance file.
std::string DefaultWatchStatePath(const std::string& instance_path);

std::string WatchSampleLine(const WatchSample& sample);
std::string WatchSampleJson(const WatchSample& sample);

}  // namespace deepinfer::tools
