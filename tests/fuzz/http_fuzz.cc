// Feeds arbitrary bytes to the HTTP parsers of outside input: the request reader that `serve` and
// the gateway run on every client connection (http::HttpRequestReader, over a real socket pair,
// pipelined requests included), the client's parser of answers (http::ResponseParser, with a
// small body buffer so that need_buffer paths run), the client's SSE parser (http::SseParser:
// whole and in pieces must agree) and the URL parser (http::ParseUrl: an origin parses back to
// itself). None may crash, and what they accept must hold their documented invariants.

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "boost/asio/buffer.hpp"
#include "http/http_reader.h"
#include "http/response_parser.h"
#include "http/socket_io.h"
#include "http/sse_parser.h"
#include "http/url.h"

namespace {

namespace beast_http = boost::beast::http;

// The AF_UNIX socket buffer holds this much without a reader.
constexpr size_t kMaxInput = 64 * 1024;
constexpr int64_t kMaxBody = 16 * 1024;

bool HasUpper(std::string_view s) {
  for (char c : s) {
    if (c >= 'A' && c <= 'Z') return true;
  }
  return false;
}

void FuzzRequestReader(std::string_view input) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;
  size_t sent = 0;
  while (sent < input.size()) {
    ssize_t n = ::send(fds[1], input.data() + sent, input.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fds[1], SHUT_WR);
  {
    deepinfer::http::FdStream stream(fds[0]);
    deepinfer::http::HttpReadOptions options;
    options.max_body_bytes = kMaxBody;
    options.idle_timeout_ms = 50;
    options.io_timeout_ms = 50;
    options.header_timeout_ms = 50;
    deepinfer::http::HttpRequestReader reader(stream, options);
    for (int i = 0; i < 64; ++i) {
      deepinfer::http::Request request;
      if (!reader.Next(&request).ok()) break;
      if (request.method.empty()) __builtin_trap();
      if (request.target.compare(0, request.path.size(), request.path) != 0) __builtin_trap();
      if (static_cast<int64_t>(request.body.size()) > kMaxBody) __builtin_trap();
      if (request.version != 10 && request.version != 11) __builtin_trap();
      for (const auto& [name, value] : request.headers) {
        if (name.empty() || HasUpper(name)) __builtin_trap();
      }
    }
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

void FuzzResponseParser(std::string_view input) {
  deepinfer::http::Headers headers;
  deepinfer::http::ResponseParser parser(&headers);
  parser.header_limit(8 * 1024);
  parser.body_limit(boost::none);
  parser.eager(true);
  char body[7];
  size_t body_bytes = 0;
  boost::system::error_code ec;
  // Fed in pieces of up to 97 bytes, as recv would hand them over.
  std::string pending;
  size_t offset = 0;
  while (!parser.is_done()) {
    if (offset < input.size() && pending.size() < 4096) {
      size_t take = std::min<size_t>(97, input.size() - offset);
      pending.append(input.substr(offset, take));
      offset += take;
    }
    parser.set_body_buffer(body, sizeof(body));
    ec = {};
    size_t used = parser.put(boost::asio::buffer(pending.data(), pending.size()), ec);
    body_bytes += parser.body_bytes();
    if (parser.body_bytes() > sizeof(body) || used > pending.size()) __builtin_trap();
    pending.erase(0, used);
    if (ec == beast_http::error::need_more) {
      if (offset >= input.size()) {
        ec = {};
        parser.put_eof(ec);
        break;
      }
      continue;
    }
    if (ec == beast_http::error::need_buffer) continue;
    if (ec) break;
    if (used == 0 && offset >= input.size()) break;
  }
  if (body_bytes > input.size()) __builtin_trap();
  if (parser.is_header_done() && (parser.status() < 0 || parser.status() > 999)) __builtin_trap();
  for (const auto& [name, value] : headers) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    if (deepinfer::http::IsHopByHopHeader(lower)) __builtin_trap();
  }
}

void FuzzSseParser(std::string_view input) {
  deepinfer::http::SseParser whole(512);
  const std::vector<deepinfer::http::SseEvent> expected = whole.Feed(input);
  deepinfer::http::SseParser pieces(512);
  std::vector<deepinfer::http::SseEvent> events;
  for (size_t i = 0; i < input.size(); i += 3) pieces.Feed(input.substr(i, 3), &events);
  if (pieces.overflowed() != whole.overflowed()) __builtin_trap();
  if (!whole.overflowed() && events != expected) __builtin_trap();
  for (const auto& e : expected) {
    if (e.data.size() > 512 || e.data.find('\r') != std::string::npos) __builtin_trap();
  }
}

void FuzzUrl(std::string_view input) {
  using deepinfer::http::UrlSchemes;
  for (const UrlSchemes schemes : {UrlSchemes::kHttp, UrlSchemes::kHttpOrHttps}) {
    auto url = deepinfer::http::ParseUrl(input.substr(0, input.find('\n')), schemes);
    if (!url.ok()) continue;
    if (url->host().empty() || url->port() < 1 || url->port() > 65535) __builtin_trap();
    if (schemes == UrlSchemes::kHttp && url->tls()) __builtin_trap();
    auto again = deepinfer::http::ParseUrl(url->ToString(), schemes);
    if (!again.ok() || again->origin() != url->origin() || again->path() != url->path()) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), std::min(size, kMaxInput));
  FuzzRequestReader(input);
  FuzzResponseParser(input);
  FuzzSseParser(input);
  FuzzUrl(input);
  return 0;
}
