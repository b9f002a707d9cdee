#pragma once

// `deepinfer gateway`: one pool router in front of several independent `deepinfer serve`
// backends. It owns client auth (Bearer keys checked against SHA-256 digests), session affinity,
// shared flow control (per-backend caps, one FIFO wait queue), a fail-closed admission file,
// active health checks, SSE pass-through and cancellation (a client that leaves closes its
// backend connection at once). See docs/gateway.md for operation.
//
// Request path: auth -> body inspection and context pre-check -> per-key limit -> session lookup
// -> slot (maybe queued) -> proxy (one retry on another backend when the connect fails) ->
// release. Every step that can end a request ends it through one RAII slot.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gateway/admission.h"
#include "gateway/backends.h"
#include "gateway/flow_control.h"
#include "gateway/key_store.h"
#include "gateway/metrics.h"
#include "gateway/request_info.h"
#include "gateway/state.h"
#include "gateway/upstream.h"
#include "http/server.h"

namespace deepinfer::gateway {

class RedisClient;

// What identifies one version of a file without reading it: a change of any field (a rewrite,
// a rename over it, a chmod) means the file may have changed.
struct FileSignature {
  bool exists = false;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileSignature& o) const {
    return exists == o.exists && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns &&
           ctime_ns == o.ctime_ns;
  }
  // stat() of `path`; a missing file has exists false.
  static FileSignature Of(const std::string& path);
};

struct GatewayOptions {
  std::vector<std::string> backend_urls;
  // The client side, with the gateway's defaults (port 19010, 4096 connections; the 503 over
  // that says "gateway").
  http::ServerOptions front = [] {
    http::ServerOptions o;
    o.port = 19010;
    o.max_connections = 4096;
    o.overload_subject = "gateway";
    return o;
  }();
  FlowOptions flow;
  UpstreamOptions upstream;
  PreCheckLimits limits;
  HealthOptions health;
  int health_interval_ms = 1000;
  int health_timeout_ms = 2000;
  std::string health_path = "/health";
  std::string key_store_path;      // required
  std::string control_path;        // the admission file; required
  std::string bindings_path;       // "" : bindings only in memory
  std::string backend_state_path;  // "" : health not persisted
  std::string state_url;           // "" (local) or redis://HOST:PORT[/DB]
  std::string redis_prefix = "deepinfer:gw:";
  std::string session_header = "x-session-id";  // lower case
  int64_t session_ttl_ms = 3600 * 1000;
  size_t max_bindings = 1000000;
  int reload_poll_ms = 250;  // file watch fallback poll (inotify wakes it sooner)
  // Reuse backend connections between requests (idle ones for at most 4 s, below the usual
  // keep-alive timeouts of backends).
  bool upstream_keepalive = true;
  // One stderr line per proxied request (key id, backend, affinity, queue wait; never the key or
  // the body). Off by default: it costs a write per request.
  bool log_requests = false;
};

// Threads: Start/Stop from one controlling thread; requests run on connection threads;
// background threads probe health and watch files.
// Lifetime: the destructor stops everything.
class Gateway {
 public:
  // Loads the key store (must be valid), admission file (missing: closed), backend-state and
  // bindings files, probes every backend once, then listens.
  // Errors: InvalidArgument for bad flags or files ("bad_key_store", "bad_backend_url",
  //   "bad_bindings_file", "bad_backend_state"), NotFound "file_not_found" for the key store,
  //   Unavailable "bind_failed" / "shared_state_unavailable".
  static absl::StatusOr<std::unique_ptr<Gateway>> Start(const GatewayOptions& options);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  int port() const;
  // Stops accepting; in-flight requests get up to `drain_timeout_ms` to finish.
  // Returns whether all finished.
  bool Stop(int drain_timeout_ms);
  // Re-reads the key store and admission file now (SIGHUP).
  void ReloadNow();

  // The request handler (public for tests).
  void Handle(const http::Request& request, http::ResponseWriter& writer);
  std::string MetricsText() const;
  std::string StatusJson() const;

 private:
  explicit Gateway(const GatewayOptions& options);
  absl::Status Init();

  // Request path (gateway.cc).
  struct ProxyCall;
  // A /v1/ request: key, pre-checks, key lease, session, admission, forwarding (with one retry
  // elsewhere when the backend refuses the connection), then metrics and the request log.
  void HandleProxy(const http::Request& request, http::ResponseWriter& writer,
                   const http::Headers& extra, Clock::time_point start);
  // HandleProxy's parts. Proxy returns the status answered (499: the client left); the parts
  // that return a status have answered the client with it, nullopt means go on.
  int Proxy(ProxyCall& call);
  void FinishProxy(ProxyCall& call, int status);
  std::optional<int> LeaseKey(const KeyRecord& key, ProxyCall& call);
  void FindSession(const KeyRecord& key, const BodyInfo& body, ProxyCall& call);
  std::optional<int> CheckAdmitted(ProxyCall& call, AdmitResult result);
  void RecordRouting(ProxyCall& call);
  ProxyResult Forward(ProxyCall& call);
  std::optional<int> RetryElsewhere(ProxyCall& call, bool first_spilled, ProxyResult* result);
  void HandleModels(http::ResponseWriter& writer, const http::Headers& extra);
  void RespondError(http::ResponseWriter& writer, const http::Headers& extra,
                    const absl::Status& status, int retry_after_s = 0);
  // The accepted key, or nullptr when it is not accepted (the 401 answer is sent). The record
  // is this thread's and stays valid until the thread's next Authenticate (a thread serves one
  // request at a time).
  const KeyRecord* Authenticate(const http::Request& request, http::ResponseWriter& writer,
                                const http::Headers& extra);

  // Background work (gateway_admin.cc).
  void ProbeLoop(size_t backend);
  void ProbeOnce(size_t backend);
  void WatchLoop();
  void ReloadKeys();
  void ReloadAdmission();
  void UpdateEligibility();
  void OnHealthChange(size_t backend);
  void WriteBackendState();
  std::shared_ptr<const KeyStore> keys() const;
  // The key store and the generation it was installed under, read together.
  std::pair<std::shared_ptr<const KeyStore>, uint64_t> KeysAndGeneration() const;
  void InstallKeys(std::shared_ptr<const KeyStore> store) ABSL_EXCLUSIVE_LOCKS_REQUIRED(files_mu_);
  Admission admission() const;
  GatewayGauges Gauges() const;

  const GatewayOptions options_;
  std::unique_ptr<BackendTable> backends_;
  std::unique_ptr<RedisClient> redis_;
  std::unique_ptr<CounterStore> counters_;
  std::unique_ptr<BindingStore> bindings_;
  std::unique_ptr<FlowControl> flow_;
  std::unique_ptr<UpstreamPool> pool_;
  GatewayMetrics metrics_;
  std::unique_ptr<http::Server> server_;

  mutable absl::Mutex files_mu_;
  std::shared_ptr<const KeyStore> keys_ ABSL_GUARDED_BY(files_mu_);
  // Unique in the process, never 0, new with every installed key store; read without the lock
  // by Authenticate's per-thread cache of the last verified key.
  std::atomic<uint64_t> keys_generation_{0};
  // Why the last reload was rejected ("" when it loaded).
  std::string keys_error_ ABSL_GUARDED_BY(files_mu_);
  int64_t keys_loaded_unix_ ABSL_GUARDED_BY(files_mu_) = 0;
  Admission admission_ ABSL_GUARDED_BY(files_mu_);
  int64_t admission_loaded_unix_ ABSL_GUARDED_BY(files_mu_) = 0;
  // The files as Start found them just before loading them; WatchLoop takes over from these.
  FileSignature keys_signature_;
  FileSignature control_signature_;

  std::atomic<bool> stopping_{false};
  std::atomic<bool> reload_requested_{false};
  std::atomic<bool> backend_state_dirty_{true};
  // Only for the probe loops' waits: Stop sets stopping_ under it, then signals, so that a wait
  // cannot miss it.
  absl::Mutex stop_mu_;
  absl::CondVar stop_cv_;
  std::vector<std::thread> threads_;
};

// Wall clock. Units: seconds / milliseconds since the epoch.
int64_t UnixSeconds();
int64_t UnixMillis();

}  // namespace deepinfer::gateway
