#pragma once

// The gateway's client-facing HTTP/1.1 server: keep-alive, Boost.Beast parsing. It differs from
// http::HttpServer in what a proxy needs: any status with any headers, bodies of known or unknown
// length passed through as they arrive, and the client socket exposed so that a gone client is seen
// within one wait slice.
//
// Threads: idle keep-alive connections wait in one epoll set (one-shot), and a pool of worker
// threads waits on it; the worker that takes a ready connection serves its request to the end
// with blocking I/O (the proxy's waits stay simple), then hands the connection back. So threads
// follow requests in flight, not open connections: at low load one hot thread serves every
// connection, as an event loop would (the kernel wakes the most recent waiter first), and a
// long SSE stream holds one thread. One thread is always left waiting: the worker that takes
// the last waiting seat starts another first.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "http/http_server.h"

namespace deepinfer::gateway {

using Headers = http::Headers;

// A request as the API server reads it (method, target, path, lower-cased headers, body).
using FrontRequest = http::HttpRequest;

// How a handler answers: Respond once, or BeginBody, Write..., End.
// Threads: used only by the connection's own thread.
class FrontWriter {
 public:
  virtual ~FrontWriter() = default;

  // A whole response with Content-Length. `headers` must not carry framing headers.
  // Returns false when the client is gone.
  virtual bool Respond(int status, const Headers& headers, std::string_view body) = 0;
  // Commits status and headers. With `content_length` the body is exactly that long; without,
  // it is chunked (HTTP/1.1) or ends with the connection (HTTP/1.0).
  virtual bool BeginBody(int status, const Headers& headers,
                         std::optional<uint64_t> content_length) = 0;
  // Like BeginBody, but the head is held until the first Write, End, Flush or Abort, so that it
  // leaves in one send with the first body bytes (one packet and one wakeup of the client less
  // per answer). The caller must Flush before it waits for body bytes. Returns false when the
  // client is already known to be gone.
  virtual bool BeginBodyHeld(int status, const Headers& headers,
                             std::optional<uint64_t> content_length) {
    return BeginBody(status, headers, content_length);
  }
  // Sends a held head now (nothing when none is held). Returns false when the client is gone.
  virtual bool Flush() { return !PeerClosed(); }
  // Sends `data` at once (no buffering beyond a held head).
  virtual bool Write(std::string_view data) = 0;
  // Ends the body (the last chunk for chunked bodies).
  virtual bool End() = 0;
  // Ends the connection without completing the body, so the client sees a truncated response.
  virtual void Abort() = 0;
  // True when the client closed the connection or a write failed. Never blocks.
  virtual bool PeerClosed() = 0;
  virtual bool started() const = 0;
  virtual int status() const = 0;
  // The client's socket, for waits that must end when the client leaves (-1: none).
  virtual int client_fd() const { return -1; }
  // The path of the request being answered (error bodies take the shape of its API).
  virtual std::string_view request_path() const { return {}; }
};

using FrontHandler = std::function<void(const FrontRequest&, FrontWriter&)>;

struct FrontServerOptions {
  std::string host = "127.0.0.1";
  int port = 19010;  // 0: any free port
  int64_t max_request_bytes = int64_t{32} << 20;
  int max_connections = 4096;   // more are answered 503 and closed
  int idle_timeout_ms = 75000;  // keep-alive wait for the next request
  int io_timeout_ms = 60000;    // stalled read of a started request, or stalled write
  size_t thread_stack_bytes = size_t{256} << 10;
  // Worker threads kept waiting for events when the load falls; more exit after ten seconds
  // without work.
  int max_idle_threads = 4;
};

// Threads: Start/Stop from one controlling thread; handlers run on worker threads, one request
// at a time per connection. Lifetime: the destructor stops the server and waits for every
// worker thread.
class FrontServer {
 public:
  // Binds and listens, then starts the worker threads.
  // Errors: InvalidArgument "bad_address"; Unavailable "bind_failed"; Internal "epoll_failed".
  static absl::StatusOr<std::unique_ptr<FrontServer>> Start(const FrontServerOptions& options,
                                                            FrontHandler handler);
  ~FrontServer();
  FrontServer(const FrontServer&) = delete;
  FrontServer& operator=(const FrontServer&) = delete;

  int port() const { return port_; }
  // Open client connections (idle and busy). Thread-safe.
  int num_connections() const;
  // True once Stop began; handlers may use it to end long waits.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Stops accepting and waits up to `timeout_ms` for connections to end at their next idle
  // point (idle ones close at once). Returns whether all ended.
  bool Stop(int timeout_ms = 5000);

 private:
  struct Connection;
  FrontServer(const FrontServerOptions& options, FrontHandler handler);
  void StartWorker();  // needs mu_
  static void* WorkerMain(void* arg);
  void WorkerLoop();
  void AcceptAll();
  // Sends the 503 overload answer without waiting, and closes `fd`.
  void Refuse(int fd) const;
  void Serve(uint64_t id);
  // Serves requests until the connection has no more input ready; false: close it.
  bool ServeRequests(Connection& c);
  void CloseIdle(bool expired_only);  // needs mu_
  void Close(uint64_t id);            // needs mu_

  const FrontServerOptions options_;
  const FrontHandler handler_;
  std::atomic<bool> stopping_{false};
  std::string overload_response_;  // a whole 503 answer, for connections over the limit
  int port_ = 0;
  int listen_fd_ = -1;  // under mu_ once workers run (-1 after Stop)
  int epoll_fd_ = -1;
  int wake_fd_ = -1;   // an eventfd, readable once stopping: wakes every waiting worker
  int spare_fd_ = -1;  // held open so that a connection can still be taken (and refused) at EMFILE
  std::atomic<int> waiting_workers_{0};
  std::atomic<int64_t> last_sweep_ms_{0};

  mutable std::mutex mu_;
  std::condition_variable changed_;  // a connection or a worker ended
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  uint64_t next_id_ = 2;  // 0 and 1 are the wake and listen sockets in epoll data
  int workers_ = 0;
};

}  // namespace deepinfer::gateway
