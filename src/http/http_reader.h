#pragma once

// Reads the requests of one keep-alive HTTP/1.1 connection with Boost.Beast: shared by `serve`
// and the gateway (http::Server).

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "http/request.h"
#include "http/socket_io.h"

namespace deepinfer::http {

struct HttpReadOptions {
  int64_t max_body_bytes = int64_t{32} << 20;
  int idle_timeout_ms = 75000;  // wait for the next request's head on an idle connection
  int io_timeout_ms = 60000;    // stalled read inside a request
  // The whole head, from its first byte: a client that dribbles its head a byte at a time
  // (slowloris) cannot hold the connection longer.
  int header_timeout_ms = 60000;
  // The caller calls Next only once the socket is readable (it waited in epoll) or
  // HasBufferedInput() is true, so Next never polls before its first recv.
  bool called_when_readable = false;
};

// Threads: one connection thread. Lifetime: borrows the stream.
class HttpRequestReader {
 public:
  HttpRequestReader(FdStream& stream, const HttpReadOptions& options);
  ~HttpRequestReader();

  // Reads the next request into *request (replacing its fields): method, target, path, version,
  // keep-alive, headers with lower-cased names in arrival order, body. Answers
  // "Expect: 100-continue" itself. Heads are limited to 64 KiB.
  // Returns OK; or the error to answer before closing the connection, with *request holding
  // what its head said (keep_alive false): ResourceExhausted "request_too_large" (413) for a
  // body over max_body_bytes, InvalidArgument "bad_http_request" (400) for a malformed request
  // (an HTTP/1.1 one without exactly one Host header included);
  // or Cancelled "connection_closed" when the connection ends with nothing to answer (the
  // client closed an idle connection or left mid-request, a timeout, the server stopping).
  absl::Status Next(Request* request);

  // True when bytes of a next (pipelined) request were read with the last one: the socket
  // may never become readable for them, so the caller must call Next without waiting.
  bool HasBufferedInput() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::http
