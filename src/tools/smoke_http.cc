#include "tools/smoke_http.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

namespace beast = boost::beast;
namespace beast_http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

// Runs the io_context until the one pending operation completed. The stream's expiry closes
// the socket at the deadline, which completes the operation with an error, so this never waits
// past the deadline.
void RunUntilDone(net::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

// `what` is "connect", "write" or "read".
absl::Status NetError(const error_code& ec, const char* what) {
  if (ec == beast::error::timeout) {
    return MakeError(absl::StatusCode::kDeadlineExceeded, "timeout",
                     fmt::format("{} timed out", what));
  }
  return UnavailableError(what[0] == 'c' ? "connect_failed" : "io_error",
                          fmt::format("{}: {}", what, ec.message()));
}

absl::StatusOr<ProbeResponse> Exchange(const ServerUrl& server, const ProbeRequest& request,
                                       const ProbeSink& sink) {
  net::io_context ioc;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(request.timeout_s * 1000.0));
  tcp::resolver resolver(ioc);
  error_code ec;
  auto endpoints = resolver.resolve(server.host, std::to_string(server.port), ec);
  if (ec) {
    return UnavailableError("connect_failed",
                            fmt::format("cannot resolve {}: {}", server.host, ec.message()));
  }
  beast::tcp_stream stream(ioc);
  stream.expires_at(deadline);
  stream.async_connect(endpoints, [&](const error_code& e, const tcp::endpoint&) { ec = e; });
  RunUntilDone(ioc);
  if (ec) return NetError(ec, "connect");

  beast_http::request<beast_http::string_body> req;
  req.method_string(beast::string_view(request.method.data(), request.method.size()));
  req.target(beast::string_view(request.target.data(), request.target.size()));
  req.version(11);
  req.set(beast_http::field::host, server.host + ":" + std::to_string(server.port));
  req.set(beast_http::field::connection, "close");
  req.set(beast_http::field::accept, "*/*");
  for (const auto& [name, value] : request.headers) {
    req.set(beast::string_view(name.data(), name.size()),
            beast::string_view(value.data(), value.size()));
  }
  if (!request.body.empty() || request.method == "POST") {
    req.set(beast_http::field::content_type, "application/json");
    req.body() = request.body;
    req.prepare_payload();
  }
  stream.expires_at(deadline);
  beast_http::async_write(stream, req, [&](const error_code& e, size_t) { ec = e; });
  RunUntilDone(ioc);
  if (ec) return NetError(ec, "write");

  beast::flat_buffer buffer;
  beast_http::response_parser<beast_http::string_body> parser;
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  stream.expires_at(deadline);
  beast_http::async_read_header(stream, buffer, parser,
                                [&](const error_code& e, size_t) { ec = e; });
  RunUntilDone(ioc);
  if (ec) return NetError(ec, "read");

  ProbeResponse out;
  out.status = static_cast<int>(parser.get().result_int());
  auto ct = parser.get().find(beast_http::field::content_type);
  if (ct != parser.get().end()) out.content_type = std::string(ct->value());
  const bool to_sink = sink != nullptr && out.status >= 200 && out.status < 300;
  size_t handed = 0;
  while (!parser.is_done()) {
    stream.expires_at(deadline);
    beast_http::async_read_some(stream, buffer, parser,
                                [&](const error_code& e, size_t) { ec = e; });
    RunUntilDone(ioc);
    // A server that closes instead of ending the body is an error only when the length was known.
    if (ec == beast_http::error::end_of_stream || ec == net::error::eof) break;
    if (ec) return NetError(ec, "read");
    if (to_sink) {
      std::string& body = parser.get().body();
      if (body.size() > handed) {
        bool more = sink(std::string_view(body).substr(handed));
        handed = body.size();
        if (!more) {
          out.aborted = true;
          stream.socket().shutdown(tcp::socket::shutdown_both, ec);
          stream.close();
          return out;
        }
      }
      // Keep memory flat on long streams.
      if (handed > (1 << 20)) {
        body.clear();
        handed = 0;
      }
    }
  }
  if (to_sink) {
    std::string& body = parser.get().body();
    if (body.size() > handed) sink(std::string_view(body).substr(handed));
  } else {
    out.body = std::move(parser.get().body());
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return out;
}

}  // namespace

absl::StatusOr<ServerUrl> ParseServerUrl(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad_url", fmt::format("'{}': {}", url, why));
  };
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    if (url.rfind("https://", 0) == 0) {
      return bad("https is not supported; probe the instance's loopback http:// address");
    }
    return bad("must start with http://");
  }
  std::string rest = url.substr(scheme.size());
  if (rest.find_first_of("?#") != std::string::npos) return bad("must not have a query");
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  ServerUrl out;
  if (slash != std::string::npos) out.prefix = rest.substr(slash);
  while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
  if (authority.find('@') != std::string::npos) return bad("must not carry credentials");
  std::string host = authority;
  std::string port_text;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {  // [::1]:8000
    size_t close = authority.find(']');
    if (close == std::string::npos) return bad("unterminated IPv6 address");
    host = authority.substr(1, close - 1);
    std::string tail = authority.substr(close + 1);
    if (!tail.empty()) {
      if (tail[0] != ':') return bad("bad port");
      port_text = tail.substr(1);
      has_port = true;
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string::npos) {
    host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
    has_port = true;
  }
  if (has_port) {
    char* end = nullptr;
    long value = port_text.empty() ? -1 : std::strtol(port_text.c_str(), &end, 10);
    if (port_text.empty() || *end != '\0' || value < 1 || value > 65535) return bad("bad port");
    out.port = static_cast<int>(value);
  }
  if (host.empty()) return bad("no host");
  out.host = host;
  return out;
}

absl::StatusOr<ProbeResponse> ProbeFetch(const ServerUrl& server, const ProbeRequest& request,
                                         const ProbeSink& sink) {
  try {
    return Exchange(server, request, sink);
  } catch (const std::exception& e) {
    // Asio/Beast throw only on allocation failure or misuse; keep it at this boundary.
    return UnavailableError("io_error", e.what());
  }
}

std::vector<std::string> SseSplitter::Feed(std::string_view bytes) {
  std::vector<std::string> events;
  auto end_line = [&] {
    std::string_view line = line_;
    if (line.empty()) {
      if (has_data_) events.push_back(data_);
      data_.clear();
      has_data_ = false;
    } else if (line.rfind("data", 0) == 0 && (line.size() == 4 || line[4] == ':')) {
      std::string_view value = line.size() > 5 ? line.substr(5) : std::string_view();
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
    line_.clear();
  };
  for (char c : bytes) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r') {
      end_line();
      skip_lf_ = true;
    } else if (c == '\n') {
      end_line();
    } else {
      line_ += c;
    }
  }
  return events;
}

}  // namespace deepinfer::tools
