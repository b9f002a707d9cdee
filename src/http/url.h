#pragma once

// The one URL type of the HTTP layer: where a server listens ("http://host:port[/path]"), for
// the gateway's backends, `deepinfer bench`, `deepinfer smoke` and `deepinfer watch`; and where
// `serve` fetches an image from ("https://..." too).

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace deepinfer::http {

enum class Scheme { kHttp, kHttps };

// An http:// or https:// URL split into its parts, with its normalized origin. Backends and the
// tools' servers are plain http (reached over loopback or SSH tunnels, or an instance's own
// address); https is for image fetches (http/client.h connects over TLS).
class Url {
 public:
  Url() = default;
  // `host` is a name, an IPv4 address or an IPv6 address without brackets; `path` has no trailing
  // slash ("" for the root).
  Url(std::string host, int port, std::string path = "", Scheme scheme = Scheme::kHttp);

  Scheme scheme() const { return scheme_; }
  bool tls() const { return scheme_ == Scheme::kHttps; }
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  const std::string& path() const { return path_; }
  // "http://host:port" ("http://[v6]:port", "https://..."), no trailing slash: the name the
  // gateway gives a backend everywhere (admission file, bindings, metrics).
  const std::string& origin() const { return origin_; }
  // "host:port" ("[v6]:port"): the Host header of a request to this URL.
  std::string_view host_port() const;
  // origin() + path().
  std::string ToString() const { return origin_ + path_; }

 private:
  Scheme scheme_ = Scheme::kHttp;
  std::string host_;
  int port_ = 80;
  std::string path_;
  std::string origin_ = "http://:80";
};

// Which schemes ParseUrl takes: plain http for backends and the tools, https too for fetches.
enum class UrlSchemes { kHttp, kHttpOrHttps };

// Parses "http://host[:port][/path]" (with kHttpOrHttps, "https://..." too). The scheme may be in
// any case; scheme and host are lower-cased, the path keeps its case and loses its trailing
// slashes. The port defaults to 80 (https: 443).
// Refused: another scheme (https with kHttp), user info ("user@"), a query or fragment, an empty
// host, a host with characters other than letters, digits, '.', '-' and '_' (for an IPv6 address
// in brackets: letters, digits, '.', '-' and ':', so no zone), a port that is not 1-65535 in
// digits, a path with spaces or control characters.
// Errors: InvalidArgument "bad_url" ("'URL': why").
absl::StatusOr<Url> ParseUrl(std::string_view text, UrlSchemes schemes = UrlSchemes::kHttp);

}  // namespace deepinfer::http
