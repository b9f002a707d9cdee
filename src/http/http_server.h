#pragma once

// A small HTTP/1.1 server: one listening socket, one thread (with a small stack) per connection,
// keep-alive, Boost.Beast for parsing and serializing. Streaming answers use chunked transfer
// coding so that the connection stays reusable after `data: [DONE]`.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "http/tcp_server.h"

namespace deepinfer::http {

// Header fields as (name, value) pairs in arrival order.
using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent, with the query
  std::string path;    // target without the query
  std::string body;
  Headers headers;  // names lower-cased
  bool keep_alive = true;
  int version = 11;  // 10 or 11

  // First header named `name` (lower case), or "".
  std::string_view Header(std::string_view name) const;
};

// What the request log says about one answer beyond method, path, status and duration. Route
// handlers fill it through ResponseWriter::log(); the observer reads it. Never holds prompt or
// answer text. Units: tokens; times are steady_clock points (default: never happened).
struct RequestLog {
  std::chrono::steady_clock::time_point received;     // the whole request was read
  std::chrono::steady_clock::time_point first_token;  // the first generated token arrived
  std::string id;  // the response id ("chatcmpl-…", "cmpl-…", "msg_…"), when there is one
  bool stream = false;
  bool generated = false;  // a generation ran: the token counts and `end` are meaningful
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  std::string end;    // "stop", "length", "client_gone", "error" (with generated)
  std::string error;  // the error code of an error answer ("invalid_value", ...), else empty
};

// How a handler answers: either Respond once, or BeginStream, WriteStream..., EndStream.
// Threads: used only by the connection's own thread.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // The request log entry of this answer (see RequestLog).
  RequestLog& log() { return log_; }
  const RequestLog& log() const { return log_; }

  // Sends a whole response. Returns false when the peer is gone.
  virtual bool Respond(int status, std::string_view content_type, std::string_view body) = 0;
  // Commits status 200 with `content_type` and an open-ended body.
  virtual bool BeginStream(std::string_view content_type) = 0;
  virtual bool WriteStream(std::string_view data) = 0;
  virtual bool EndStream() = 0;
  // True when the client has closed the connection (or shut down its sending side). Never
  // blocks. Cost: one poll() and at most one recv(MSG_PEEK).
  virtual bool PeerClosed() = 0;
  // True when the server is shutting down (PeerClosed() then also answers true, so that long
  // generations end); the answer should then be a 503 "shutting_down".
  virtual bool stopping() const { return false; }
  // Whether anything was sent yet, and the status of the response (0 before any).
  virtual bool started() const = 0;
  virtual int status() const = 0;

 private:
  RequestLog log_;
};

// Called on the connection thread for each complete request.
using HttpHandler = std::function<void(const HttpRequest&, ResponseWriter&)>;
// Called after each answer (including the server's own 400/413/503 answers), on the connection
// thread, with what the handler put in the request log.
// Units: seconds from the complete request to the end of the answer.
using HttpObserver =
    std::function<void(const HttpRequest&, int status, double seconds, const RequestLog&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8900;  // 0: any free port (see HttpServer::port)
  int64_t max_request_bytes = int64_t{32} << 20;
  int max_connections = 1024;   // more are answered 503 and closed
  int idle_timeout_ms = 75000;  // keep-alive wait for the next request
  int io_timeout_ms = 60000;    // stalled read of a started request, or stalled write
  size_t thread_stack_bytes = size_t{1} << 20;
};

// Threads: Start/Stop from one controlling thread; handlers run on connection threads.
// Lifetime: the destructor calls Stop().
class HttpServer {
 public:
  // Binds and listens (so a busy port fails here, before any model is loaded), then starts the
  // accept thread.
  // Errors: InvalidArgument "bad_address" for an unparsable host; Unavailable "bind_failed".
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           HttpHandler handler,
                                                           HttpObserver observer = nullptr);
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return tcp_->port(); }
  int num_connections() const { return tcp_->num_connections(); }

  // Stops accepting, lets connections end at their next idle point and waits for them up to
  // `timeout_ms`. Returns whether every connection ended.
  bool Stop(int timeout_ms = 5000);

 private:
  HttpServer(const HttpServerOptions& options, HttpHandler handler, HttpObserver observer);
  void ServeConnection(int fd);

  const HttpServerOptions options_;
  const HttpHandler handler_;
  const HttpObserver observer_;
  std::atomic<bool> stopping_{false};
  // Last, so that it is destroyed first: its destructor waits for the connection threads,
  // which use the members above.
  std::unique_ptr<TcpServer> tcp_;
};

}  // namespace deepinfer::http
