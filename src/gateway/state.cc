#include "gateway/state.h"

#include <algorithm>
#include <cstdio>

#include "util/error_codes.h"
#include "util/json.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

constexpr int64_t kWriteChangedEveryMs = 1000;
constexpr int64_t kWriteTouchedEveryMs = 30000;

}  // namespace

absl::StatusOr<int> LocalCounterStore::TryAcquire(const std::vector<std::string>& names, int cap) {
  absl::MutexLock lock(&mu_);
  int best = -1;
  int64_t best_count = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t count = counts_[names[i]];
    if (count >= cap) continue;
    if (best < 0 || count < best_count) {
      best = static_cast<int>(i);
      best_count = count;
    }
  }
  if (best >= 0) counts_[names[best]]++;
  return best;
}

void LocalCounterStore::Release(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(name);
  if (it != counts_.end() && it->second > 0) it->second--;
}

absl::StatusOr<int64_t> LocalCounterStore::Total(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(name);
  return it == counts_.end() ? 0 : it->second;
}

LocalBindingStore::LocalBindingStore(std::string path, int64_t ttl_ms, size_t max_entries)
    : path_(std::move(path)), ttl_ms_(ttl_ms), max_entries_(std::max<size_t>(max_entries, 1)) {}

absl::Status LocalBindingStore::Load(int64_t now_ms) {
  if (path_.empty()) return absl::OkStatus();
  auto text = util::ReadFile(path_);
  if (!text.ok()) {
    if (text.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    return text.status();
  }
  auto json = util::ParseJson(*text);
  if (!json.ok() || !json->is_object() || !json->contains("bindings") ||
      !(*json)["bindings"].is_array()) {
    return InvalidArgumentError(util::codes::kBadBindingsFile,
                                "bindings file " + path_ + " is not valid");
  }
  absl::MutexLock lock(&mu_);
  for (const auto& entry : (*json)["bindings"]) {
    if (!entry.is_object() || !entry.contains("session") || !entry["session"].is_string() ||
        !entry.contains("backend") || !entry["backend"].is_string() ||
        !entry.contains("last_used_ms") || !entry["last_used_ms"].is_number_integer()) {
      continue;
    }
    int64_t last = entry["last_used_ms"].get<int64_t>();
    if (now_ms - last > ttl_ms_) continue;
    table_[entry["session"].get<std::string>()] = Entry{entry["backend"].get<std::string>(), last};
  }
  EvictLocked(now_ms);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> LocalBindingStore::Lookup(const std::string& session,
                                                                     int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  auto it = table_.find(session);
  if (it == table_.end()) return std::optional<std::string>();
  if (now_ms - it->second.last_used_ms > ttl_ms_) {
    table_.erase(it);
    changed_ = true;
    return std::optional<std::string>();
  }
  it->second.last_used_ms = now_ms;
  touched_ = true;
  return std::optional<std::string>(it->second.backend);
}

absl::StatusOr<std::string> LocalBindingStore::BindIfAbsent(const std::string& session,
                                                            const std::string& backend_url,
                                                            int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = table_.try_emplace(session, Entry{backend_url, now_ms});
  if (!inserted && now_ms - it->second.last_used_ms > ttl_ms_) {
    it->second = Entry{backend_url, now_ms};
    inserted = true;
  }
  it->second.last_used_ms = now_ms;
  if (inserted) {
    changed_ = true;
    if (table_.size() > max_entries_) EvictLocked(now_ms);
  }
  auto found = table_.find(session);
  return found == table_.end() ? backend_url : found->second.backend;
}

absl::Status LocalBindingStore::Rebind(const std::string& session, const std::string& backend_url,
                                       int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  table_[session] = Entry{backend_url, now_ms};
  changed_ = true;
  if (table_.size() > max_entries_) EvictLocked(now_ms);
  return absl::OkStatus();
}

std::map<std::string, int64_t> LocalBindingStore::CountByBackend() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int64_t> counts;
  for (const auto& [session, entry] : table_) counts[entry.backend]++;
  return counts;
}

size_t LocalBindingStore::size() {
  absl::MutexLock lock(&mu_);
  return table_.size();
}

void LocalBindingStore::EvictLocked(int64_t now_ms) {
  for (auto it = table_.begin(); it != table_.end();) {
    if (now_ms - it->second.last_used_ms > ttl_ms_) {
      it = table_.erase(it);
      changed_ = true;
    } else {
      ++it;
    }
  }
  if (table_.size() <= max_entries_) return;
  // Over the bound: drop the least recently used tenth (amortizes the sort).
  std::vector<std::pair<int64_t, std::string>> order;
  order.reserve(table_.size());
  for (const auto& [session, entry] : table_) order.emplace_back(entry.last_used_ms, session);
  size_t target = max_entries_ - max_entries_ / 10;
  size_t drop = table_.size() - target;
  std::nth_element(order.begin(), order.begin() + drop, order.end());
  for (size_t i = 0; i < drop; ++i) table_.erase(order[i].second);
  changed_ = true;
}

std::string LocalBindingStore::Serialize() {
  std::vector<std::pair<std::string, Entry>> entries;
  {
    absl::MutexLock lock(&mu_);
    entries.assign(table_.begin(), table_.end());
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out = "{\"version\":1,\"bindings\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    util::Json e{{"session", entries[i].first},
                 {"backend", entries[i].second.backend},
                 {"last_used_ms", entries[i].second.last_used_ms}};
    out += (i ? ",\n" : "\n") + util::DumpJson(e);
  }
  out += "\n]}\n";
  return out;
}

void LocalBindingStore::Maintain(int64_t now_ms) {
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    EvictLocked(now_ms);
    int64_t since = now_ms - last_write_ms_;
    write = !path_.empty() && ((changed_ && since >= kWriteChangedEveryMs) ||
                               (touched_ && since >= kWriteTouchedEveryMs));
    if (write) {
      changed_ = false;
      touched_ = false;
      last_write_ms_ = now_ms;
    }
  }
  if (write) Write();
}

void LocalBindingStore::Flush(int64_t now_ms) {
  {
    absl::MutexLock lock(&mu_);
    EvictLocked(now_ms);
    if (path_.empty() || (!changed_ && !touched_)) return;
    changed_ = false;
    touched_ = false;
    last_write_ms_ = now_ms;
  }
  Write();
}

void LocalBindingStore::Write() {
  absl::Status status = util::WriteFileAtomically(path_, Serialize());
  if (!status.ok()) {
    std::fprintf(stderr, "deepinfer gateway: cannot write bindings file: %s\n",
                 OneLineError(status).c_str());
    absl::MutexLock lock(&mu_);
    changed_ = true;
  }
}

}  // namespace deepinfer::gateway
