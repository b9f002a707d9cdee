#include "http/url.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "fmt/format.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::http {
namespace {

constexpr std::string_view kHttp = "http://";
constexpr std::string_view kHttps = "https://";

std::string_view SchemePrefix(Scheme scheme) { return scheme == Scheme::kHttps ? kHttps : kHttp; }

bool IsDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
}

// Names and IPv4: letters, digits, '.', '-', '_'. IPv6 (bracketed): letters, digits, '.', '-',
// ':' (no '%' zone: a zone names an interface of this machine only).
bool IsHostChar(char c, bool bracketed) {
  return absl::ascii_isalnum(c) || c == '.' || c == '-' || (bracketed ? c == ':' : c == '_');
}

}  // namespace

Url::Url(std::string host, int port, std::string path, Scheme scheme)
    : scheme_(scheme), host_(std::move(host)), port_(port), path_(std::move(path)) {
  const bool v6 = host_.find(':') != std::string::npos;
  origin_ = fmt::format("{}{}{}{}:{}", SchemePrefix(scheme_), v6 ? "[" : "", host_,
                        v6 ? "]" : "", port_);
}

std::string_view Url::host_port() const {
  return std::string_view(origin_).substr(SchemePrefix(scheme_).size());
}

absl::StatusOr<Url> ParseUrl(std::string_view text, UrlSchemes schemes) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError(util::codes::kBadUrl, fmt::format("'{}': {}", text, why));
  };
  auto has_prefix = [&](std::string_view prefix) {
    std::string lower(text.substr(0, prefix.size()));
    absl::AsciiStrToLower(&lower);
    return lower == prefix;
  };
  Scheme scheme = Scheme::kHttp;
  if (has_prefix(kHttps)) {
    if (schemes == UrlSchemes::kHttp) return bad("https:// is not supported, only http://");
    scheme = Scheme::kHttps;
  } else if (!has_prefix(kHttp)) {
    return bad(schemes == UrlSchemes::kHttp ? "only http:// URLs are supported"
                                            : "only http:// and https:// URLs are supported");
  }
  std::string_view rest = text.substr(SchemePrefix(scheme).size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return bad("a query or fragment is not allowed");
  }
  const size_t slash = rest.find('/');
  std::string authority(rest.substr(0, slash));
  absl::AsciiStrToLower(&authority);
  std::string path(slash == std::string_view::npos ? "" : rest.substr(slash));
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (authority.find('@') != std::string::npos) return bad("user info is not allowed");

  std::string host;
  std::string_view port_text;
  bool has_port = false;
  const bool bracketed = !authority.empty() && authority.front() == '[';
  if (bracketed) {  // [::1]:8000
    const size_t close = authority.find(']');
    if (close == std::string::npos) return bad("unclosed IPv6 bracket");
    host = authority.substr(1, close - 1);
    std::string_view tail = std::string_view(authority).substr(close + 1);
    if (!tail.empty()) {
      if (tail.front() != ':') return bad("junk after the IPv6 address");
      port_text = tail.substr(1);
      has_port = true;
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string::npos) {
    host = authority.substr(0, colon);
    port_text = std::string_view(authority).substr(colon + 1);
    has_port = true;
  } else {
    host = authority;
  }
  if (host.empty()) return bad("no host");
  for (char c : host) {
    if (!IsHostChar(c, bracketed)) return bad("bad character in host");
  }
  // The path goes into request lines as is.
  for (char c : path) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return bad("bad character in path");
  }
  int port = scheme == Scheme::kHttps ? 443 : 80;
  if (has_port) {
    if (!IsDigits(port_text) || port_text.size() > 5) return bad("bad port");
    port = std::stoi(std::string(port_text));
    if (port < 1 || port > 65535) return bad("port out of range");
  }
  return Url(std::move(host), port, std::move(path), scheme);
}

}  // namespace deepinfer::http
