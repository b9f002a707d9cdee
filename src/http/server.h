#pragma once

// The HTTP/1.1 server of `serve` and the gateway: keep-alive, Boost.Beast parsing
// (HttpRequestReader), answers of any status with any headers, bodies of known length or chunked
// (so that a connection stays reusable after an SSE stream), the client socket exposed so that
// a gone client is seen within one wait slice.
//
// Threads: idle keep-alive connections wait in one epoll set (one-shot), and a pool of worker
// threads waits on it; the worker that takes a ready connection serves its request to the end
// with blocking I/O (a generation or a proxied stream stays a simple loop), then hands the
// connection back. So threads follow requests in flight, not open connections: at low load one
// hot thread serves every connection, as an event loop would (the kernel wakes the most recent
// waiter first), and a long SSE stream holds one thread. One thread is always left waiting: the
// worker that takes the last waiting seat starts another first.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "http/request.h"
#include "http/response_writer.h"

namespace deepinfer::http {

// Called on a worker thread for each complete request.
using Handler = std::function<void(const Request&, ResponseWriter&)>;
// Called after each answer (including the server's own 400/413 answers to bad requests), on the
// same thread, with what the handler put in the request log. Not called for connections refused
// over max_connections.
// Units: seconds from the complete request to the end of the answer.
using Observer =
    std::function<void(const Request&, int status, double seconds, const RequestLog& log)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (see Server::port)
  int64_t max_request_bytes = int64_t{32} << 20;
  int max_connections = 1024;   // more are answered 503 "too_many_connections" and closed
  int idle_timeout_ms = 75000;  // keep-alive wait for the next request
  int io_timeout_ms = 60000;    // stalled read of a started request (or its head), or write
  // Worker threads run handlers: a generation parses JSON and renders chat templates on its
  // worker, a proxied request only relays bytes.
  size_t thread_stack_bytes = size_t{256} << 10;
  // Worker threads kept waiting for events when the load falls; more exit after ten seconds
  // without work.
  int max_idle_threads = 4;
  // The Server header of every answer ("": none; a proxy passes its backend's on).
  std::string server_name;
  // What the 503 too_many_connections message calls this server ("server", "gateway").
  std::string overload_subject = "server";
  // Request ids (http/request_id.h): each request gets one (RequestLog::request_id: the
  // client's usable X-Request-Id, else `request_id_prefix` + 16 hex digits) and every answer
  // carries it as X-Request-Id, plus `request-id` on Anthropic paths, unless the handler's
  // headers already hold them (a proxy passing its backend's on).
  bool request_ids = false;
  std::string request_id_prefix = "req-";
};

// Threads: Start/Stop from one controlling thread; handlers run on worker threads, one request
// at a time per connection. Lifetime: the destructor stops the server and waits for every
// worker thread.
class Server {
 public:
  // Binds and listens (so a busy port fails here, before a model is loaded), then starts the
  // worker threads.
  // Errors: InvalidArgument "bad_address"; Unavailable "bind_failed"; Internal "epoll_failed",
  //   "thread_failed".
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options,
                                                       Handler handler,
                                                       Observer observer = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }
  // Open client connections (idle and busy). Thread-safe.
  int num_connections() const;
  // True once Stop began; handlers see it as ResponseWriter::stopping().
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Stops accepting and waits up to `timeout_ms` for connections to end at their next idle
  // point (idle ones close at once; requests read but not yet answered are answered first).
  // Returns whether all ended.
  bool Stop(int timeout_ms = 5000);

 private:
  struct Connection;
  Server(const ServerOptions& options, Handler handler, Observer observer);
  void StartWorker() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void* WorkerMain(void* arg);
  void WorkerLoop();
  void AcceptAll();
  // Sends the 503 overload answer without waiting, and closes `fd`.
  void Refuse(int fd) const;
  void Serve(uint64_t id);
  // Serves requests until the connection has no more input ready; false: close it.
  bool ServeRequests(Connection& c);
  // Calls the observer (if any) with the answer `writer` gave.
  void Observe(const Request& request, const ResponseWriter& writer,
               std::chrono::steady_clock::time_point start) const;
  void CloseIdle(bool expired_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Close(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServerOptions options_;
  const Handler handler_;
  const Observer observer_;
  std::atomic<bool> stopping_{false};
  std::string overload_response_;  // a whole 503 answer, for connections over the limit
  int port_ = 0;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd, readable once stopping: wakes every waiting worker
  std::atomic<int> waiting_workers_{0};
  std::atomic<int64_t> last_sweep_ms_{0};

  mutable absl::Mutex mu_;
  absl::CondVar changed_;                    // a connection or a worker ended
  int listen_fd_ ABSL_GUARDED_BY(mu_) = -1;  // -1 after Stop
  // Held open so that a connection can still be taken (and refused) at EMFILE.
  int spare_fd_ ABSL_GUARDED_BY(mu_) = -1;
  // A Connection's busy and pending flags are under mu_ too (clang cannot name the outer
  // class's mutex in the nested struct, so they carry no annotation).
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  // 0 and 1 are the wake and listen sockets in epoll data.
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 2;
  int workers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace deepinfer::http
