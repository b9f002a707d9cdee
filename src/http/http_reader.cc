#include "http/http_reader.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "boost/asio/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

namespace beast_http = boost::beast::http;

constexpr size_t kHeaderLimitBytes = 64 * 1024;
// Beast reads at most max(512, free capacity) per recv: without room, a 1 KB request takes
// three recv calls.
constexpr size_t kReadBufferBytes = 4 * 1024;

// Beast's parser writing straight into an Request: its fields and body go where they are
// kept, without the intermediate beast_http::request (a tree of separately allocated fields, then
// copied into Request::headers: 2 % of the gateway's CPU per request).
class RequestParser final : public beast_http::basic_parser<true> {
 public:
  explicit RequestParser(Request* request) : request_(request) {
    request_->headers.reserve(16);  // one allocation for a usual head
  }

  int host_fields() const { return host_fields_; }
  std::string_view expect() const { return expect_; }

 private:
  using string_view = boost::beast::string_view;
  using error_code = boost::system::error_code;

  void on_request_impl(beast_http::verb, string_view method, string_view target, int version,
                       error_code&) override {
    request_->method.assign(method.data(), method.size());
    request_->target.assign(target.data(), target.size());
    request_->version = version;
  }
  void on_response_impl(int, string_view, int, error_code& ec) override {
    ec = beast_http::error::bad_version;  // never called for requests
  }
  void on_field_impl(beast_http::field field, string_view name, string_view value,
                     error_code& ec) override {
    // RFC 9110 section 6.5.1: trailer fields are not merged into the header (a key or session
    // id sent as a trailer would slip past what checks the head).
    if (header_done_) return;
    // The parser trimmed the value.
    if (field == beast_http::field::transfer_encoding && !boost::beast::iequals(value, "chunked")) {
      // RFC 9112 section 6.3: with chunked not the final coding the body's length is unknown
      // (Beast would read none, and the body as the next request: smuggling); and no other
      // coding is understood.
      ec = beast_http::error::bad_transfer_encoding;
      return;
    }
    if (field == beast_http::field::host) ++host_fields_;
    if (field == beast_http::field::expect && expect_.empty())
      expect_.assign(value.data(), value.size());
    auto& [lower, text] = request_->headers.emplace_back(std::string(name.data(), name.size()),
                                                         std::string(value.data(), value.size()));
    absl::AsciiStrToLower(&lower);  // ASCII, no locale
  }
  void on_header_impl(error_code&) override { header_done_ = true; }
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code&) override {
    // Within the body limit, which the parser checked against Content-Length already.
    if (content_length) request_->body.reserve(static_cast<size_t>(*content_length));
  }
  size_t on_body_impl(string_view body, error_code&) override {
    request_->body.append(body.data(), body.size());
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override {
    request_->body.append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  Request* request_;
  bool header_done_ = false;
  int host_fields_ = 0;
  std::string expect_;
};

// RFC 9112 section 2.2: a server SHOULD ignore empty lines received before a request line (some
// clients end a body with an extra CRLF). Drops CR and LF bytes at the start of `buffer`.
void DropLeadingEmptyLines(boost::beast::flat_buffer& buffer) {
  const auto* data = static_cast<const char*>(buffer.data().data());
  size_t n = 0;
  while (n < buffer.size() && (data[n] == '\r' || data[n] == '\n')) ++n;
  buffer.consume(n);
}

}  // namespace

struct HttpRequestReader::Impl {
  FdStream& stream;
  HttpReadOptions options;
  // Holds only what the parser has not consumed yet (body bytes move to the request as they
  // arrive): at most a head, a chunk-size line with its extensions, or trailers. Bounded, so
  // that an endless chunk extension or trailer is a 400 (buffer_overflow), not unbounded memory.
  boost::beast::flat_buffer buffer{kHeaderLimitBytes + kReadBufferBytes};
  bool first = true;
};

HttpRequestReader::HttpRequestReader(FdStream& stream, const HttpReadOptions& options)
    : impl_(new Impl{stream, options}) {
  impl_->buffer.reserve(kReadBufferBytes);
}

HttpRequestReader::~HttpRequestReader() = default;

bool HttpRequestReader::HasBufferedInput() const { return impl_->buffer.size() > 0; }

absl::Status HttpRequestReader::Next(Request* request) {
  Impl& m = *impl_;
  *request = Request();
  RequestParser parser(request);
  parser.header_limit(kHeaderLimitBytes);
  parser.body_limit(static_cast<uint64_t>(m.options.max_body_bytes));
  // The idle wait applies until the next request's head is in.
  const bool idle = m.buffer.size() == 0;
  m.stream.set_read_timeout_ms(idle ? m.options.idle_timeout_ms : m.options.io_timeout_ms);
  boost::system::error_code ec;
  // After an answer the client has not sent its next request yet (unless it pipelines: then the
  // buffer holds it, or the first poll returns at once), so a recv before polling would be
  // wasted. The wait is done here rather than inside the read, so that the deadline for the
  // whole head starts at its first byte.
  const bool wait = idle && !m.first && !m.options.called_when_readable;
  if (wait) m.stream.WaitReadable(ec);
  // Once bytes are there, each further read of the head waits at most the I/O timeout.
  if (wait || m.options.called_when_readable) m.stream.set_read_timeout_ms(m.options.io_timeout_ms);
  m.first = false;
  if (!ec) {
    m.stream.set_read_deadline(Clock::now() +
                               std::chrono::milliseconds(m.options.header_timeout_ms));
    // Empty lines that arrived alone: read on until a request line starts (within the head's
    // deadline and limit).
    size_t skipped = 0;
    for (DropLeadingEmptyLines(m.buffer); !ec && m.buffer.size() == 0;) {
      const size_t n = m.stream.read_some(m.buffer.prepare(kReadBufferBytes), ec);
      m.buffer.commit(n);
      skipped += n;
      DropLeadingEmptyLines(m.buffer);
      if (!ec && skipped > kHeaderLimitBytes) ec = beast_http::error::header_limit;
    }
    if (!ec) beast_http::read_header(m.stream, m.buffer, parser, ec);
    m.stream.set_read_deadline(std::nullopt);
  }
  m.stream.set_read_timeout_ms(m.options.io_timeout_ms);
  // RFC 9112 section 3.2: an HTTP/1.1 request without exactly one Host field is answered 400.
  const bool bad_host = !ec && request->version == 11 && parser.host_fields() != 1;
  if (!ec && !bad_host) {
    // RFC 9110 section 10.1.1: an HTTP/1.0 client's expectation is ignored.
    if (request->version >= 11 && boost::beast::iequals(parser.expect(), "100-continue") &&
        !m.stream.WriteAll("HTTP/1.1 100 Continue\r\n\r\n")) {
      return MakeError(absl::StatusCode::kCancelled, util::codes::kConnectionClosed,
                       "Client gone.");
    }
    beast_http::read(m.stream, m.buffer, parser, ec);
  }
  // Also when the head failed part way (a body over the limit is refused as soon as its
  // Content-Length is read): what was parsed (method, target) decides the shape of the error.
  if (parser.is_header_done()) request->keep_alive = parser.keep_alive();
  request->path = request->target.substr(0, request->target.find('?'));
  if (bad_host) {
    request->keep_alive = false;
    return InvalidArgumentError(util::codes::kBadHttpRequest,
                                "An HTTP/1.1 request needs exactly one Host header.");
  }
  if (ec) {
    request->keep_alive = false;
    if (IsQuietHttpClose(ec)) {
      return MakeError(absl::StatusCode::kCancelled, util::codes::kConnectionClosed, ec.message());
    }
    if (ec == beast_http::error::body_limit) return RequestTooLargeError(m.options.max_body_bytes);
    return InvalidArgumentError(util::codes::kBadHttpRequest,
                                fmt::format("Malformed HTTP request: {}", ec.message()));
  }
  // Empty lines after the body are not a next request: the connection can wait idle.
  DropLeadingEmptyLines(m.buffer);
  return absl::OkStatus();
}

}  // namespace deepinfer::http
