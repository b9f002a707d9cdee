#include "gateway/backends.h"

#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::gateway {

absl::StatusOr<BackendAddress> ParseBackendUrl(std::string_view url) {
  absl::StatusOr<http::Url> address = http::ParseUrl(url);
  if (!address.ok()) {
    return InvalidArgumentError(
        util::codes::kBadBackendUrl,
        fmt::format("Bad backend URL {}", std::string(address.status().message())));
  }
  if (!address->path().empty()) {
    return InvalidArgumentError(
        util::codes::kBadBackendUrl,
        fmt::format("Bad backend URL '{}': a backend URL has no path", url));
  }
  return address;
}

BackendTable::BackendTable(std::vector<BackendAddress> backends, HealthOptions options)
    : backends_(std::move(backends)), options_(options), health_(backends_.size()) {}

int BackendTable::IndexOf(std::string_view url) const {
  for (size_t i = 0; i < backends_.size(); ++i) {
    if (backends_[i].origin() == url) return static_cast<int>(i);
  }
  return -1;
}

bool BackendTable::RecordProbe(size_t i, bool ok, bool connection_failure, const std::string& error,
                               int64_t now_unix) {
  absl::MutexLock lock(&mu_);
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
  absl::MutexLock lock(&mu_);
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
  absl::MutexLock lock(&mu_);
  return health_[i].healthy;
}

std::vector<bool> BackendTable::HealthyMask() const {
  absl::MutexLock lock(&mu_);
  std::vector<bool> mask(health_.size());
  for (size_t i = 0; i < health_.size(); ++i) mask[i] = health_[i].healthy;
  return mask;
}

std::vector<BackendHealth> BackendTable::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

std::string BackendTable::SerializeState() const {
  using util::Json;
  std::vector<BackendHealth> health = Snapshot();
  Json list = Json::array();
  for (size_t i = 0; i < backends_.size(); ++i) {
    list.push_back(Json{{"url", backends_[i].origin()},
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
    return InvalidArgumentError(util::codes::kBadBackendState, "backend-state file is not valid");
  }
  absl::MutexLock lock(&mu_);
  for (const auto& entry : (*json)["backends"]) {
    if (!entry.is_object() || !entry.contains("url") || !entry["url"].is_string()) continue;
    int index = -1;
    for (size_t i = 0; i < backends_.size(); ++i) {
      if (backends_[i].origin() == entry["url"].get<std::string>()) index = static_cast<int>(i);
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
