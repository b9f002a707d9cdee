#pragma once

// The one HTTP/1.1 client: blocking, over the socket helpers of http/socket_io.h and Beast's
// parser (http/response_parser.h), and over TLS (http/tls.h) for https:// URLs. ClientConnection
// is the connection-level piece the gateway drives itself (keep-alive reuse, relaying as bytes
// arrive, closing the moment its client leaves); Fetch is one whole exchange for the tools
// (`deepinfer bench`, `smoke`, `watch`), the gateway's health probes and serve's image fetches.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/system/error_code.hpp"
#include "http/response_parser.h"
#include "http/socket_io.h"
#include "http/tls.h"
#include "http/url.h"

namespace deepinfer::http {

// The head of one request, built by appending (one allocation): request line, Host, the caller's
// headers in order, Content-Length (for a body, and always for POST, PUT and PATCH, so that an
// empty body is framed) and Connection.
// Cost: one allocation when `size_hint` covers the headers.
class RequestHead {
 public:
  RequestHead(std::string_view method, std::string_view target, std::string_view host_port,
              size_t size_hint = 0);
  void Add(std::string_view name, std::string_view value);
  // The finished head ("...\r\n\r\n"); the builder is spent.
  std::string Finish(size_t body_bytes, bool keep_alive);

 private:
  std::string out_;
  bool framed_;  // the method always carries a Content-Length
};

// Waits and hooks of one connection.
// Units: milliseconds; a timeout <= 0 waits without limit.
struct ClientOptions {
  int connect_timeout_ms = 10000;
  int write_timeout_ms = 60000;   // each wait for the socket to take request bytes
  int header_timeout_ms = 60000;  // request sent -> the answer's head
  int idle_timeout_ms = 60000;    // each wait for body bytes
  int slice_ms = 20;              // how often a wait consults `cancel`
  // Every wait ends with timed_out at this time, however recently bytes moved.
  std::optional<Clock::time_point> deadline;
  // Consulted between wait slices; true ends the wait with operation_aborted (the caller is gone
  // or gave up).
  std::function<bool()> cancel;
  // A socket whose hang-up ends a wait at once, so that `cancel` is consulted then: the gateway
  // watches its client's socket while it waits on the backend.
  int watch_fd = -1;
};

// One HTTP/1.1 client connection: send a request, read the head of its answer, then the body in
// pieces into the caller's buffer. Closing the connection (destruction, or Connect/Adopt over an
// open one) is how the server learns the client gave up; Release hands an idle keep-alive
// connection back to a pool instead.
// Errors: the error_codes are Beast's and Asio's: timed_out (a timeout or the deadline),
//   operation_aborted (cancel), eof and the socket's errors, boost::beast::http::error for a
//   malformed answer (bad_status: a status outside 100-599, 101, or too many 1xx answers); over
//   TLS also TlsStream's (OpenSSL's, stream_truncated).
// Threads: one thread at a time. Lifetime: borrows the Headers given to ReadHead.
class ClientConnection {
 public:
  // What ReadHead accepts as a head, and the response buffer's bound besides the body buffer.
  static constexpr size_t kHeaderLimitBytes = 64 * 1024;
  // A good size for the buffer given to ReadBody: whole SSE events and small answers at once.
  static constexpr size_t kBodyChunkBytes = 16 * 1024;

  // Lifetime: borrows `options`.
  explicit ClientConnection(const ClientOptions& options) : options_(options) {}
  ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // Opens a new connection (closing the current one) within connect_timeout_ms (cut to the
  // deadline). For an https URL the TLS handshake follows (TlsStream: the certificate verified
  // for url.host()), within connect_timeout_ms of its own (cut to the deadline); the connection
  // then carries everything over TLS.
  // Errors: ConnectTcp's: Unavailable "connect_failed", DeadlineExceeded "connect_timeout";
  //   TlsStream::Handshake's: Unavailable "tls_handshake_failed", DeadlineExceeded
  //   "connect_timeout", Cancelled "client_closed_request".
  absl::Status Connect(const Url& url);
  absl::Status Connect(const std::string& host, int port);
  // Takes over an open socket (an idle keep-alive connection from a pool).
  void Adopt(int fd);
  int fd() const { return fd_; }
  // Gives up the socket without closing it (-1 when none); a TLS session ends with it.
  int Release();
  // The stream's waits are set from the options; a caller may add hooks (set_before_read_wait).
  // Over TLS it carries the ciphertext.
  FdStream& stream() { return stream_; }

  // Sends `head` and `body` in as few sends as the socket allows (one for a small request: a
  // server that reads the head alone would otherwise wait for the body).
  boost::system::error_code Send(std::string_view head, std::string_view body);

  // Reads the head of the final answer (1xx answers are skipped, at most 8) within
  // header_timeout_ms: status and end-to-end headers into `headers` (cleared first); see
  // ResponseParser. `head_request`: the answer to a HEAD has no body.
  boost::system::error_code ReadHead(Headers* headers, bool head_request = false);
  // The answer's parser, after ReadHead: status(), sse(), content_length(), keep_alive().
  const ResponseParser& response() const { return *parser_; }

  // Reads the next body bytes into `data` (at most `size`), each wait within idle_timeout_ms.
  // Returns how many arrived; ec is set on an error, and may be set with bytes returned.
  size_t ReadBody(char* data, size_t size, boost::system::error_code& ec);
  // The whole answer was read.
  bool done() const { return parser_ && parser_->is_done(); }
  // The answer was read whole, the server keeps the connection open and sent nothing more:
  // Release() may hand it to the next request. Never for TLS (a bare socket cannot carry its
  // session).
  bool reusable() const {
    return done() && parser_->keep_alive() && buffer_.size() == 0 && tls_ == nullptr;
  }

 private:
  void SetUpStream();
  absl::Status StartTls(const std::string& host);

  const ClientOptions& options_;
  int fd_ = -1;
  FdStream stream_{-1};
  // Holds only what the parser has not consumed (body bytes move to the caller's buffer):
  // bounded, so that an endless chunk extension or trailer fails the answer instead of growing
  // without limit.
  boost::beast::flat_buffer buffer_{kHeaderLimitBytes + kBodyChunkBytes};
  std::optional<ResponseParser> parser_;
  // The TLS session over stream_ (https), else null. After stream_: it borrows it.
  std::unique_ptr<TlsStream> tls_;
};

// One request of Fetch. `target` is the path and query, sent as is.
struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";
  Headers headers;   // sent in order after Host
  std::string body;  // framed with Content-Length
};

struct ClientResponse {
  int status = 0;
  Headers headers;   // end-to-end headers, names as received
  std::string body;  // a body read whole
  // True when the sink hung up before the end of the body.
  bool aborted = false;
  // The first header named `name` (ASCII case ignored), "" when none.
  std::string_view Header(std::string_view name) const;
};

// Units: milliseconds, <= 0 no limit. idle_timeout_ms bounds every single wait (connect, a write,
// the head, each body read), so that a slow but live stream is never cut; total_timeout_ms
// bounds the whole exchange.
struct FetchOptions {
  int connect_timeout_ms = 0;  // 0: idle_timeout_ms
  int idle_timeout_ms = 60000;
  int total_timeout_ms = 0;
  // A body read whole that grows past this fails the exchange (0: no limit).
  int64_t max_body_bytes = 0;
  // Consulted between wait slices (about every 20 ms); true ends the exchange with Cancelled
  // "client_closed_request" (the caller's own client left). Null: never.
  std::function<bool()> cancel;
};

// Called with each piece of the body as it arrives (chunked coding removed); false hangs up.
using BodySink = std::function<bool(std::string_view piece)>;

// One exchange on a connection of its own ("Connection: close"). With a sink, a 2xx body goes
// to the sink piece by piece and ClientResponse::body stays empty; other bodies (and every body
// without a sink) are read whole.
// An https URL is fetched over TLS (ClientConnection::Connect).
// Errors: Unavailable "connect_failed" (refused, unresolvable), DeadlineExceeded
//   "connect_timeout" (the TLS handshake's too); Unavailable "tls_handshake_failed" (the server's
//   certificate could not be verified, no common TLS version); Unavailable "io_error" (reset,
//   early close, a TLS stream cut without close_notify, malformed answer),
//   DeadlineExceeded "timeout"; ResourceExhausted "body_too_large". Past the connect, the message
//   names the step ("write: ...", "read: ...").
// Threads: safe to call from many threads at once.
absl::StatusOr<ClientResponse> Fetch(const Url& url, const ClientRequest& request,
                                     const FetchOptions& options, const BodySink& sink = nullptr);

}  // namespace deepinfer::http
