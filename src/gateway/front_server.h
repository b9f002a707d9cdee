#pragma once

// The gateway's client-facing HTTP/1.1 server: api::TcpServer (one listening socket, one thread
// with a small stack per connection), keep-alive, Boost.Beast parsing. It differs from
// api::HttpServer in what a proxy needs: any status with any headers, bodies of known or unknown
// length passed through as they arrive, and the client socket exposed so that a gone client is seen
// within one wait slice.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "api/http_server.h"
#include "api/tcp_server.h"

namespace deepinfer::gateway {

using Headers = std::vector<std::pair<std::string, std::string>>;

// A request as the API server reads it (method, target, path, lower-cased headers, body).
using FrontRequest = api::HttpRequest;

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
};

// Threads: Start/Stop from one controlling thread; handlers run on connection threads.
// Lifetime: the destructor stops the server and waits for every connection thread.
class FrontServer {
 public:
  // Binds and listens, then starts the accept thread.
  // Errors: InvalidArgument "bad_address"; Unavailable "bind_failed".
  static absl::StatusOr<std::unique_ptr<FrontServer>> Start(const FrontServerOptions& options,
                                                            FrontHandler handler);
  ~FrontServer();
  FrontServer(const FrontServer&) = delete;
  FrontServer& operator=(const FrontServer&) = delete;

  int port() const { return tcp_->port(); }
  int num_connections() const { return tcp_->num_connections(); }
  // True once Stop began; handlers may use it to end long waits.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Stops accepting and waits up to `timeout_ms` for connections to end at their next idle
  // point. Returns whether all ended.
  bool Stop(int timeout_ms = 5000);

 private:
  FrontServer(const FrontServerOptions& options, FrontHandler handler);
  void ServeConnection(int fd);

  const FrontServerOptions options_;
  const FrontHandler handler_;
  std::atomic<bool> stopping_{false};
  // Last, so that it is destroyed first: its destructor waits for the connection threads.
  std::unique_ptr<api::TcpServer> tcp_;
};

}  // namespace deepinfer::gateway
