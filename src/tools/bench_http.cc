// Blocking calls built from Beast's asynchronous operations on a private io_context: that is the
// only way to get per-operation timeouts (beast::tcp_stream's timer works with async operations
// only, and asio's synchronous reads ignore SO_RCVTIMEO).

#include "tools/bench_http.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace beast_http = beast::http;
using Clock = std::chrono::steady_clock;

absl::Status NetError(const char* what, const beast::error_code& ec) {
  if (ec == beast::error::timeout) {
    return MakeError(absl::StatusCode::kDeadlineExceeded, "timeout",
                     fmt::format("{}: timed out", what));
  }
  const bool connecting = std::string_view(what) == "connect";
  return UnavailableError(connecting ? "connect_failed" : "io_error",
                          fmt::format("{}: {}", what, ec.message()));
}

// One connection for one exchange ("Connection: close").
class Exchange {
 public:
  Exchange(const BaseUrl& base, const HttpOptions& options)
      : base_(base), options_(options), stream_(ioc_) {
    if (options.total_timeout_s > 0) {
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options.total_timeout_s));
    }
  }

  ~Exchange() {
    beast::error_code ignored;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  }

  absl::Status Send(const std::string& method, const std::string& path, const std::string& body,
                    bool streaming) {
    asio::ip::tcp::resolver resolver(ioc_);
    beast::error_code ec;
    auto endpoints = resolver.resolve(base_.host, base_.port, ec);
    if (ec) return NetError("connect", ec);
    DI_RETURN_IF_ERROR(Arm());
    ec = Run([&](auto handler) { stream_.async_connect(endpoints, handler); });
    if (ec) return NetError("connect", ec);
    stream_.socket().set_option(asio::ip::tcp::no_delay(true), ec);

    beast_http::request<beast_http::string_body> req{
        method == "GET" ? beast_http::verb::get : beast_http::verb::post, base_.prefix + path, 11};
    req.set(beast_http::field::host, base_.host + ":" + base_.port);
    req.set(beast_http::field::user_agent, "deepinfer-bench");
    req.set(beast_http::field::connection, "close");
    req.set(beast_http::field::accept, streaming ? "text/event-stream" : "application/json");
    if (!options_.api_key.empty()) {
      req.set(beast_http::field::authorization, "Bearer " + options_.api_key);
    }
    if (method != "GET") {
      req.set(beast_http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    DI_RETURN_IF_ERROR(Arm());
    ec = Run([&](auto handler) { beast_http::async_write(stream_, req, handler); });
    if (ec) return NetError("write", ec);

    parser_.emplace();
    parser_->body_limit(boost::none);
    DI_RETURN_IF_ERROR(Arm());
    ec = Run(
        [&](auto handler) { beast_http::async_read_header(stream_, buffer_, *parser_, handler); });
    if (ec) return NetError("read", ec);
    return absl::OkStatus();
  }

  HttpResponse Head() const {
    HttpResponse r;
    const auto& msg = parser_->get();
    r.status = static_cast<int>(msg.result_int());
    auto it = msg.find(beast_http::field::content_type);
    if (it != msg.end()) r.content_type = std::string(it->value());
    return r;
  }

  // Reads the body to its end, handing each piece to `sink` (which may stop early).
  absl::Status ReadBody(const BodySink& sink) {
    char chunk[16384];
    while (!parser_->is_done()) {
      parser_->get().body().data = chunk;
      parser_->get().body().size = sizeof(chunk);
      DI_RETURN_IF_ERROR(Arm());
      beast::error_code ec = Run(
          [&](auto handler) { beast_http::async_read_some(stream_, buffer_, *parser_, handler); });
      if (ec == beast_http::error::need_buffer) ec = {};
      size_t n = sizeof(chunk) - parser_->get().body().size;
      if (n > 0 && !sink(std::string_view(chunk, n))) return absl::OkStatus();
      if (ec) return NetError("read", ec);
    }
    return absl::OkStatus();
  }

 private:
  // Sets the timer of the next operation: the idle timeout, cut to what is left of the total.
  absl::Status Arm() {
    auto budget = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options_.idle_timeout_s));
    if (deadline_) {
      auto left = *deadline_ - Clock::now();
      if (left <= Clock::duration::zero()) {
        return MakeError(absl::StatusCode::kDeadlineExceeded, "timeout",
                         "the request ran past --timeout");
      }
      budget = std::min(budget, left);
    }
    stream_.expires_after(budget);
    return absl::OkStatus();
  }

  // Starts one asynchronous operation and runs the private io_context until it completes.
  template <typename Start>
  beast::error_code Run(Start start) {
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  const BaseUrl& base_;
  const HttpOptions& options_;
  asio::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<beast_http::response_parser<beast_http::buffer_body>> parser_;
  std::optional<Clock::time_point> deadline_;
};

}  // namespace

std::string BaseUrl::ToString() const { return fmt::format("http://{}:{}{}", host, port, prefix); }

absl::StatusOr<BaseUrl> ParseBaseUrl(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    return InvalidArgumentError("bad_url",
                                fmt::format("'{}': only http:// URLs are supported", url));
  }
  std::string rest = url.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) {
    path.resize(path.size() - 3);
  }
  BaseUrl base;
  base.prefix = path;
  size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']') == std::string::npos) {
    base.host = authority.substr(0, colon);
    base.port = authority.substr(colon + 1);
  } else {
    base.host = authority;
    base.port = "80";
  }
  if (base.host.empty()) return InvalidArgumentError("bad_url", fmt::format("'{}': no host", url));
  bool digits =
      !base.port.empty() && base.port.size() <= 5 &&
      std::all_of(base.port.begin(), base.port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(base.port) == 0 || std::stoi(base.port) > 65535) {
    return InvalidArgumentError("bad_url", fmt::format("'{}': bad port", url));
  }
  return base;
}

absl::StatusOr<HttpResponse> HttpFetch(const BaseUrl& base, const std::string& method,
                                       const std::string& path, const std::string& body,
                                       const HttpOptions& options) {
  Exchange exchange(base, options);
  DI_RETURN_IF_ERROR(exchange.Send(method, path, body, /*streaming=*/false));
  HttpResponse response = exchange.Head();
  DI_RETURN_IF_ERROR(exchange.ReadBody([&](std::string_view piece) {
    response.body.append(piece.data(), piece.size());
    return true;
  }));
  return response;
}

absl::StatusOr<HttpResponse> HttpPostStreaming(const BaseUrl& base, const std::string& path,
                                               const std::string& body, const HttpOptions& options,
                                               const BodySink& sink) {
  Exchange exchange(base, options);
  DI_RETURN_IF_ERROR(exchange.Send("POST", path, body, /*streaming=*/true));
  HttpResponse response = exchange.Head();
  if (response.status >= 200 && response.status < 300) {
    DI_RETURN_IF_ERROR(exchange.ReadBody(sink));
  } else {
    DI_RETURN_IF_ERROR(exchange.ReadBody([&](std::string_view piece) {
      // An error body is short; a misbehaving server must not make the client hoard memory.
      if (response.body.size() < (1 << 20)) response.body.append(piece.data(), piece.size());
      return true;
    }));
  }
  return response;
}

std::vector<std::string> SseParser::Feed(std::string_view bytes) {
  std::vector<std::string> out;
  for (char c : bytes) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      skip_lf_ = c == '\r';
      Line(pending_, &out);
      pending_.clear();
    } else {
      pending_.push_back(c);
    }
  }
  return out;
}

void SseParser::Line(std::string_view line, std::vector<std::string>* out) {
  if (line.empty()) {
    // A blank line dispatches the event.
    if (has_data_) out->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // comment
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_.push_back('\n');
  data_.append(value.data(), value.size());
  has_data_ = true;
}

}  // namespace deepinfer::tools
