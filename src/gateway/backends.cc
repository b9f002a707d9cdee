#include "gateway/backends.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "fmt/format.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

absl::Status BadUrl(std::string_view url, std::string_view why) {
  return InvalidArgumentError("bad_backend_url", fmt::format("Bad backend URL '{}': {}", url, why));
}

}  // namespace

absl::StatusOr<BackendAddress> ParseBackendUrl(std::string_view url) {
  std::string lower(url);
  absl::AsciiStrToLower(&lower);
  constexpr std::string_view kScheme = "http://";
  if (lower.rfind(kScheme, 0) != 0) return BadUrl(url, "only http:// is supported");
  std::string rest = lower.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos || rest.find('?') != std::string::npos ||
      rest.find('@') != std::string::npos) {
    return BadUrl(url, "a backend URL has no path, query or user info");
  }
  BackendAddress address;
  size_t colon = rest.rfind(':');
  std::string port_text;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return BadUrl(url, "unclosed IPv6 bracket");
    address.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return BadUrl(url, "junk after IPv6 address");
      port_text = rest.substr(close + 2);
    }
  } else if (colon != std::string::npos) {
    address.host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
  } else {
    address.host = rest;
  }
  if (address.host.empty()) return BadUrl(url, "no host");
  // Names and IPv4: letters, digits, '.', '-', '_'. IPv6 (bracketed): hex digits, ':', '.'.
  const bool bracketed = !rest.empty() && rest.front() == '[';
  for (char c : address.host) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
              (!bracketed && c == '_') || (bracketed && c == ':');
    if (!ok) return BadUrl(url, "bad character in host");
  }
  address.port = 80;
  if (!port_text.empty()) {
    if (port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      return BadUrl(url, "bad port");
    }
    address.port = std::atoi(port_text.c_str());
    if (address.port < 1 || address.port > 65535) return BadUrl(url, "port out of range");
  }
  bool v6 = address.host.find(':') != std::string::npos;
  address.url =
      fmt::format("http://{}{}{}:{}", v6 ? "[" : "", address.host, v6 ? "]" : "", address.port);
  return address;
}

BackendTable::BackendTable(std::vector<BackendAddress> backends, HealthOptions options)
    : backends_(std::move(backends)), options_(options), health_(backends_.size()) {}

int BackendTable::IndexOf(std::string_view url) const {
  for (size_t i = 0; i < backends_.size(); ++i) {
    if (backends_[i].url == url) return static_cast<int>(i);
  }
  return -1;
}

bool BackendTable::RecordProbe(size_t i, bool ok, bool connection_failure, const std::string& error,
                               int64_t now_unix) {
  std::lock_guard<std::mutex> lock(mu_);
  BackendHealth& h = health_[i];
  bool before = h.healthy;
  if (ok) {
    h.consecutive_failures = 0;
    h.consecutive_successes++;
    h.last_error.clear();
    if (!h.healthy && h.consecutive_successes >= options_.success_threshold) h.healthy = true;
  } else {
    h.consecutive_successes = 0;
    h.consecutive_failures++;
    h.last_error = error;
    if (h.healthy && (connection_failure || h.consecutive_failures >= options_.failure_threshold)) {
      h.healthy = false;
      h.ejections++;
    }
  }
  if (h.healthy != before) h.changed_unix = now_unix;
  return h.healthy != before;
}

bool BackendTable::Eject(size_t i, const std::string& error, int64_t now_unix) {
  std::lock_guard<std::mutex> lock(mu_);
  BackendHealth& h = health_[i];
  h.consecutive_successes = 0;
  h.consecutive_failures++;
  h.last_error = error;
  if (!h.healthy) return false;
  h.healthy = false;
  h.ejections++;
  h.changed_unix = now_unix;
  return true;
}

bool BackendTable::healthy(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_[i].healthy;
}

std::vector<bool> BackendTable::HealthyMask() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<bool> mask(health_.size());
  for (size_t i = 0; i < health_.size(); ++i) mask[i] = health_[i].healthy;
  return mask;
}

std::vector<BackendHealth> BackendTable::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

std::string BackendTable::SerializeState() const {
  using util::Json;
  std::vector<BackendHealth> health = Snapshot();
  Json list = Json::array();
  for (size_t i = 0; i < backends_.size(); ++i) {
    list.push_back(Json{{"url", backends_[i].url},
                        {"healthy", health[i].healthy},
                        {"consecutive_failures", health[i].consecutive_failures},
                        {"last_error", health[i].last_error},
                        {"changed_unix", health[i].changed_unix},
                        {"ejections", health[i].ejections}});
  }
  return util::DumpJson(Json{{"version", 1}, {"backends", std::move(list)}}) + "\n";
}

absl::Status BackendTable::LoadState(std::string_view text) {
  auto json = util::ParseJson(text);
  if (!json.ok() || !json->is_object() || !json->contains("backends") ||
      !(*json)["backends"].is_array()) {
    return InvalidArgumentError("bad_backend_state", "backend-state file is not valid");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& entry : (*json)["backends"]) {
    if (!entry.is_object() || !entry.contains("url") || !entry["url"].is_string()) continue;
    int index = -1;
    for (size_t i = 0; i < backends_.size(); ++i) {
      if (backends_[i].url == entry["url"].get<std::string>()) index = static_cast<int>(i);
    }
    if (index < 0) continue;
    BackendHealth& h = health_[index];
    if (entry.contains("healthy") && entry["healthy"].is_boolean()) {
      h.healthy = entry["healthy"].get<bool>();
    }
    if (entry.contains("changed_unix") && entry["changed_unix"].is_number_integer()) {
      h.changed_unix = entry["changed_unix"].get<int64_t>();
    }
    if (entry.contains("ejections") && entry["ejections"].is_number_unsigned()) {
      h.ejections = entry["ejections"].get<uint64_t>();
    }
    if (entry.contains("last_error") && entry["last_error"].is_string()) {
      h.last_error = entry["last_error"].get<std::string>();
    }
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::gateway
