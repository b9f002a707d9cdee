#include "api/http_reader.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "api/errors.h"
#include "boost/asio/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

namespace http = boost::beast::http;

constexpr size_t kHeaderLimitBytes = 64 * 1024;
// Beast reads at most max(512, free capacity) per recv: without room, a 1 KB request takes
// three recv calls.
constexpr size_t kReadBufferBytes = 4 * 1024;

}  // namespace

struct HttpRequestReader::Impl {
  FdStream& stream;
  HttpReadOptions options;
  boost::beast::flat_buffer buffer;
  bool first = true;
};

HttpRequestReader::HttpRequestReader(FdStream& stream, const HttpReadOptions& options)
    : impl_(new Impl{stream, options, {}, true}) {
  impl_->buffer.reserve(kReadBufferBytes);
}

HttpRequestReader::~HttpRequestReader() = default;

bool HttpRequestReader::HasBufferedInput() const { return impl_->buffer.size() > 0; }

absl::Status HttpRequestReader::Next(HttpRequest* request) {
  Impl& m = *impl_;
  *request = HttpRequest();
  http::request_parser<http::string_body> parser;
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
    http::read_header(m.stream, m.buffer, parser, ec);
    m.stream.set_read_deadline(std::nullopt);
  }
  m.stream.set_read_timeout_ms(m.options.io_timeout_ms);
  // RFC 9112 section 3.2: an HTTP/1.1 request without exactly one Host field is answered 400.
  const bool bad_host =
      !ec && parser.get().version() == 11 && parser.get().count(http::field::host) != 1;
  if (!ec && !bad_host) {
    auto expect = parser.get()[http::field::expect];
    if (boost::beast::iequals(expect, "100-continue") &&
        !m.stream.WriteAll("HTTP/1.1 100 Continue\r\n\r\n")) {
      return MakeError(absl::StatusCode::kCancelled, "connection_closed", "Client gone.");
    }
    http::read(m.stream, m.buffer, parser, ec);
  }
  {
    // Also when the head failed part way (a body over the limit is refused as soon as its
    // Content-Length is read): what was parsed decides the shape of the error answer.
    const auto& header = parser.get();
    request->method = std::string(header.method_string());
    request->target = std::string(header.target());
    request->version = header.version();
    if (parser.is_header_done()) request->keep_alive = header.keep_alive();
  }
  request->path = request->target.substr(0, request->target.find('?'));
  if (bad_host) {
    request->keep_alive = false;
    return InvalidArgumentError("bad_http_request",
                                "An HTTP/1.1 request needs exactly one Host header.");
  }
  if (ec) {
    request->keep_alive = false;
    if (IsQuietHttpClose(ec)) {
      return MakeError(absl::StatusCode::kCancelled, "connection_closed", ec.message());
    }
    if (ec == http::error::body_limit) return RequestTooLargeError(m.options.max_body_bytes);
    return InvalidArgumentError("bad_http_request",
                                fmt::format("Malformed HTTP request: {}", ec.message()));
  }
  auto message = parser.release();
  request->body = std::move(message.body());
  for (const auto& field : message) {
    std::string name(field.name_string());
    absl::AsciiStrToLower(&name);  // ASCII, no locale
    request->headers.emplace_back(std::move(name), std::string(field.value()));
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::api
