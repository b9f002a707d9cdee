#pragma once

// The parser of backend answers that the gateway relays (see ResponseParser).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "boost/beast/core/string.hpp"
#include "boost/beast/http/basic_parser.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/field.hpp"
#include "boost/beast/http/rfc7230.hpp"
#include "http/request.h"  // Headers

namespace deepinfer::http {

// Whether a header (lower-case name) is hop-by-hop or framing, and so never forwarded.
inline bool IsHopByHopHeader(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "te" || name == "trailer" || name == "transfer-encoding" || name == "upgrade" ||
         name == "content-length" || name == "host" || name == "expect" ||
         name == "proxy-authorization" || name == "proxy-authenticate";
}

// Whether the comma-separated `list` (a Connection header's value) names `token`, ignoring
// ASCII case and optional whitespace (Beast's token_list, RFC 9110 section 5.6.1).
inline bool ListsToken(std::string_view list, std::string_view token) {
  // token_list takes no whitespace before the first element; a value from the parser has none.
  const size_t first = list.find_first_not_of(" \t");
  if (first == std::string_view::npos) return false;
  return boost::beast::http::token_list(list.substr(first)).exists(token);
}

// Beast's HTTP/1.1 response parser (boost::beast::http::basic_parser) collecting a backend's
// answer straight into what the client is sent: the status, the end-to-end headers (hop-by-hop
// ones dropped, names as received, in arrival order) appended to `headers`, and the body into
// the caller's buffer; instead of through boost::beast::http::response's tree of separately
// allocated fields and a copy of each. Limits (header_limit, body_limit), skip() for HEAD,
// is_done(), keep_alive() and content_length() are basic_parser's. Errors are Beast's
// (boost::beast::http::error), plus need_buffer when the body buffer is full (as with
// boost::beast::http::buffer_body).
// Threads: one request's. Lifetime: borrows `headers`.
class ResponseParser final : public boost::beast::http::basic_parser<false> {
 public:
  explicit ResponseParser(Headers* headers) : headers_(headers) {}

  int status() const { return status_; }
  bool sse() const { return sse_; }
  bool has_request_id() const { return has_request_id_; }
  bool has_accel_buffering() const { return has_accel_buffering_; }
  bool has_cache_control() const { return has_cache_control_; }
  // The next body bytes go to `data` (up to `size`); body_bytes() says how many arrived.
  void set_body_buffer(char* data, size_t size) {
    data_ = data;
    room_ = size;
    used_ = 0;
  }
  size_t body_bytes() const { return used_; }

 private:
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                       boost::system::error_code& ec) override {
    ec = boost::beast::http::error::bad_method;  // never called for responses
  }
  void on_response_impl(int code, string_view, int, boost::system::error_code&) override {
    status_ = code;
  }
  void on_field_impl(boost::beast::http::field field, string_view name, string_view value,
                     boost::system::error_code&) override {
    // Trailer fields (after a chunked body) are dropped: the head has left already, and
    // RFC 9110 section 6.5.1 does not let them stand in for header fields.
    if (header_done_) return;
    const std::string_view text(value.data(), value.size());
    switch (field) {
      case boost::beast::http::field::connection:
        // RFC 9110 section 7.6.1: the fields it names are hop-by-hop too (removed at the end of
        // the head).
        if (!connection_.empty()) connection_ += ',';
        connection_.append(text);
        return;
      case boost::beast::http::field::content_type:
        sse_ = sse_ || boost::beast::iequals(text.substr(0, 17), "text/event-stream");
        break;
      case boost::beast::http::field::cache_control:
        has_cache_control_ = true;
        break;
      case boost::beast::http::field::unknown:
        // Every hop-by-hop header is a field Beast knows; the two the gateway looks for are not.
        if (boost::beast::iequals(name, "x-request-id")) has_request_id_ = true;
        if (boost::beast::iequals(name, "x-accel-buffering")) has_accel_buffering_ = true;
        break;
      default:
        if (IsHopByHopName(name)) return;
    }
    headers_->emplace_back(std::string(name.data(), name.size()), std::string(text));
  }
  void on_header_impl(boost::system::error_code&) override {
    header_done_ = true;
    if (connection_.empty()) return;
    std::erase_if(*headers_, [&](const auto& h) { return ListsToken(connection_, h.first); });
  }
  void on_body_init_impl(const boost::optional<std::uint64_t>&,
                         boost::system::error_code&) override {}
  size_t on_body_impl(string_view body, boost::system::error_code& ec) override {
    return Take(body, ec);
  }
  void on_chunk_header_impl(std::uint64_t, string_view, boost::system::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, string_view body,
                            boost::system::error_code& ec) override {
    return Take(body, ec);
  }
  void on_finish_impl(boost::system::error_code&) override {}

  // As Beast's buffer_body: what does not fit waits in the read buffer for the next call.
  size_t Take(string_view body, boost::system::error_code& ec) {
    const size_t n = std::min(body.size(), room_ - used_);
    if (n > 0) std::memcpy(data_ + used_, body.data(), n);
    used_ += n;
    if (n < body.size()) ec = boost::beast::http::error::need_buffer;
    return n;
  }
  static bool IsHopByHopName(string_view name) {
    char lower[32];
    if (name.size() > sizeof(lower)) return false;  // none is that long
    for (size_t i = 0; i < name.size(); ++i) lower[i] = absl::ascii_tolower(name[i]);
    return IsHopByHopHeader(std::string_view(lower, name.size()));
  }

  Headers* headers_;
  std::string connection_;  // the Connection header's elements
  bool header_done_ = false;
  int status_ = 0;
  bool sse_ = false;
  bool has_request_id_ = false;
  bool has_accel_buffering_ = false;
  bool has_cache_control_ = false;
  char* data_ = nullptr;
  size_t room_ = 0;
  size_t used_ = 0;
};

}  // namespace deepinfer::http
