#pragma once

// The listening side shared by `serve` (HttpServer) and the gateway (FrontServer): one listening
// socket, an accept thread, and one thread with a small stack per connection. Connections over
// the limit get a fixed answer and are closed. What is spoken on a connection is the caller's.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace deepinfer::http {

struct TcpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (see TcpServer::port)
  int max_connections = 1024;
  size_t thread_stack_bytes = size_t{1} << 20;
  // Sent (best effort, without waiting) to a connection over max_connections before it is
  // closed, e.g. a complete HTTP 503 response.
  std::string overload_response;
};

// Binds a listening TCP socket (SO_REUSEADDR, close-on-exec, backlog 1024) to host:port; port 0
// picks a free port, which *bound_port receives. Returns the socket.
// Errors: InvalidArgument "bad_address" (bad port, unresolvable host); Unavailable
//   "bind_failed".
absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port);

// Threads: Start/Stop from one controlling thread; `serve` runs on connection threads.
// Lifetime: the destructor stops accepting and waits for every connection thread.
class TcpServer {
 public:
  // Runs one connection; the socket (TCP_NODELAY, close-on-exec, blocking) is closed after it
  // returns. It should return soon once stopping() is true.
  using ConnectionFn = std::function<void(int fd)>;

  // Binds and listens (so a busy port fails here), then starts the accept thread.
  // Errors: InvalidArgument "bad_address" (bad port, unresolvable host); Unavailable
  //   "bind_failed".
  static absl::StatusOr<std::unique_ptr<TcpServer>> Start(const TcpServerOptions& options,
                                                          ConnectionFn serve);
  ~TcpServer();
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }
  int num_connections() const { return num_connections_.load(); }
  // True once Stop began; connection code ends its waits on it.
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  const std::atomic<bool>* stopping_flag() const { return &stopping_; }

  // Stops accepting and waits up to `timeout_ms` for the connections to end. Returns whether
  // all ended.
  bool Stop(int timeout_ms = 5000);

 private:
  TcpServer(const TcpServerOptions& options, ConnectionFn serve);
  void AcceptLoop();
  static void* ConnectionMain(void* arg);

  const TcpServerOptions options_;
  const ConnectionFn serve_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::atomic<int> num_connections_{0};
  std::mutex mu_;
  std::condition_variable all_closed_;
};

}  // namespace deepinfer::http
