// The gateway's background work (health probes, file watching, state persistence) and its
// read-only views (/metrics, /gateway/status).

#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "gateway/gateway.h"
#include "gateway/redis_state.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

std::string DirOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

FileSignature FileSignature::Of(const std::string& path) {
  FileSignature sig;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return sig;
  sig.exists = true;
  sig.inode = st.st_ino;
  sig.size = st.st_size;
  sig.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  sig.ctime_ns = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
  return sig;
}

std::shared_ptr<const KeyStore> Gateway::keys() const {
  absl::MutexLock lock(&files_mu_);
  return keys_;
}

std::pair<std::shared_ptr<const KeyStore>, uint64_t> Gateway::KeysAndGeneration() const {
  absl::MutexLock lock(&files_mu_);
  return {keys_, keys_generation_.load(std::memory_order_relaxed)};
}

void Gateway::InstallKeys(std::shared_ptr<const KeyStore> store) {
  static std::atomic<uint64_t> next_generation{1};
  keys_ = std::move(store);
  keys_generation_.store(next_generation.fetch_add(1), std::memory_order_release);
}

Admission Gateway::admission() const {
  absl::MutexLock lock(&files_mu_);
  return admission_;
}

void Gateway::ReloadNow() { reload_requested_ = true; }

void Gateway::ReloadKeys() {
  auto text = util::ReadFile(options_.key_store_path);
  absl::StatusOr<std::shared_ptr<const KeyStore>> store =
      text.ok() ? KeyStore::Parse(*text)
                : absl::StatusOr<std::shared_ptr<const KeyStore>>(text.status());
  absl::MutexLock lock(&files_mu_);
  if (!store.ok()) {
    std::string why = OneLineError(store.status());
    if (why != keys_error_) {
      std::fprintf(stderr,
                   "deepinfer gateway: key store %s rejected (%s); keeping the last good one "
                   "(%zu keys)\n",
                   options_.key_store_path.c_str(), why.c_str(), keys_->records().size());
    }
    keys_error_ = why;
    metrics_.RecordReload("keys", false);
    return;
  }
  InstallKeys(*std::move(store));
  keys_error_.clear();
  keys_loaded_unix_ = UnixSeconds();
  metrics_.RecordReload("keys", true);
  std::fprintf(stderr, "deepinfer gateway: key store reloaded (%zu keys)\n",
               keys_->records().size());
}

void Gateway::ReloadAdmission() {
  auto text = util::ReadFile(options_.control_path);
  Admission next = text.ok() ? ParseAdmission(std::string_view(*text), backends_->addresses())
                             : ParseAdmission(std::nullopt, backends_->addresses());
  bool changed;
  {
    absl::MutexLock lock(&files_mu_);
    changed = next.reason != admission_.reason || next.admitted != admission_.admitted;
    admission_ = next;
    admission_loaded_unix_ = UnixSeconds();
  }
  metrics_.RecordReload("admission", next.reason == "ok");
  if (changed) {
    int admitted = 0;
    for (bool a : next.admitted) admitted += a ? 1 : 0;
    std::fprintf(stderr, "deepinfer gateway: admission %s (%s): %d of %zu backends admitted\n",
                 next.open ? "open" : "CLOSED", next.reason.c_str(), admitted,
                 next.admitted.size());
  }
  if (flow_) UpdateEligibility();
}

void Gateway::UpdateEligibility() {
  Admission adm = admission();
  std::vector<bool> healthy = backends_->HealthyMask();
  std::vector<bool> eligible(healthy.size());
  for (size_t i = 0; i < healthy.size(); ++i) eligible[i] = healthy[i] && adm.admitted[i];
  flow_->SetEligible(eligible, adm.open);
}

void Gateway::OnHealthChange(size_t backend) {
  bool healthy = backends_->healthy(backend);
  std::fprintf(stderr, "deepinfer gateway: backend %s is %s\n",
               backends_->address(backend).origin().c_str(), healthy ? "healthy" : "UNHEALTHY");
  if (!healthy && pool_) pool_->Drop(backends_->address(backend).origin());
  backend_state_dirty_ = true;
  UpdateEligibility();
}

void Gateway::WriteBackendState() {
  if (options_.backend_state_path.empty() || !backend_state_dirty_.exchange(false)) return;
  absl::Status status =
      util::WriteFileAtomically(options_.backend_state_path, backends_->SerializeState());
  if (!status.ok()) {
    backend_state_dirty_ = true;
    std::fprintf(stderr, "deepinfer gateway: cannot write backend state: %s\n",
                 OneLineError(status).c_str());
  }
}

void Gateway::ProbeOnce(size_t backend) {
  auto response = HttpGet(backends_->address(backend), options_.health_path,
                          options_.health_timeout_ms, 1 << 16);
  bool ok = response.ok() && response->status == 200;
  bool connection_failure =
      !response.ok() && ErrorCodeOf(response.status()) == util::codes::kConnectFailed;
  std::string error;
  if (!response.ok()) {
    error = OneLineError(response.status());
  } else if (!ok) {
    error = fmt::format("{} answered {}", options_.health_path, response->status);
  }
  if (backends_->RecordProbe(backend, ok, connection_failure, error, UnixSeconds())) {
    if (flow_) {
      OnHealthChange(backend);
    } else {
      backend_state_dirty_ = true;
    }
  }
}

void Gateway::ProbeLoop(size_t backend) {
  std::mt19937 rng(static_cast<unsigned>(backend * 7919 + ::getpid()));
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  absl::MutexLock lock(&stop_mu_);
  while (!stopping_) {
    auto wait =
        std::chrono::milliseconds(static_cast<int64_t>(options_.health_interval_ms * jitter(rng)));
    const absl::Time deadline = absl::Now() + absl::FromChrono(wait);
    while (!stopping_ && !stop_cv_.WaitWithDeadline(&stop_mu_, deadline)) {
    }
    if (stopping_) break;
    stop_mu_.Unlock();
    ProbeOnce(backend);
    stop_mu_.Lock();
  }
}

void Gateway::WatchLoop() {
  int inotify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd >= 0) {
    constexpr uint32_t kMask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                               IN_DELETE | IN_ATTRIB | IN_MODIFY;
    ::inotify_add_watch(inotify_fd, DirOf(options_.key_store_path).c_str(), kMask);
    ::inotify_add_watch(inotify_fd, DirOf(options_.control_path).c_str(), kMask);
  }
  // Start took these before its loads: a change since then is reloaded on the first pass.
  FileSignature keys_sig = keys_signature_;
  FileSignature control_sig = control_signature_;
  bool first = true;
  while (!stopping_) {
    // inotify wakes this at once after a change; the poll timeout is the fallback (files on
    // filesystems without inotify, or watches that could not be set).
    if (std::exchange(first, false)) {
      // The watches are set: look at once, then wait for changes.
    } else if (inotify_fd >= 0) {
      pollfd p{inotify_fd, POLLIN, 0};
      if (::poll(&p, 1, options_.reload_poll_ms) > 0) {
        char buf[4096];
        while (::read(inotify_fd, buf, sizeof(buf)) > 0) {
        }
      }
    } else {
      ::usleep(options_.reload_poll_ms * 1000);
    }
    if (stopping_) break;
    bool forced = reload_requested_.exchange(false);
    FileSignature k = FileSignature::Of(options_.key_store_path);
    if (forced || !(k == keys_sig)) {
      keys_sig = k;
      ReloadKeys();
    }
    FileSignature c = FileSignature::Of(options_.control_path);
    if (forced || !(c == control_sig)) {
      control_sig = c;
      ReloadAdmission();
    }
    bindings_->Maintain(UnixMillis());
    WriteBackendState();
  }
  if (inotify_fd >= 0) ::close(inotify_fd);
}

GatewayGauges Gateway::Gauges() const {
  GatewayGauges g;
  FlowStats flow = flow_->Stats();
  Admission adm = admission();
  std::vector<BackendHealth> health = backends_->Snapshot();
  std::map<std::string, int64_t> bound = bindings_->CountByBackend();
  for (size_t i = 0; i < backends_->size(); ++i) {
    BackendGauges b;
    b.url = backends_->address(i).origin();
    b.inflight = flow.active[i];
    b.max_active = options_.flow.max_active_per_backend;
    b.healthy = health[i].healthy;
    b.admitted = adm.admitted[i];
    auto it = bound.find(b.url);
    b.bindings = it == bound.end() ? 0 : it->second;
    g.backends.push_back(std::move(b));
  }
  g.queue_depth = flow.waiting;
  g.max_waiting = options_.flow.max_waiting;
  g.slots_acquired = flow.acquired_total;
  g.slots_released = flow.released_total;
  g.admission_open = adm.open;
  g.open_connections = server_ ? server_->num_connections() : 0;
  g.keys = static_cast<int64_t>(keys()->records().size());
  return g;
}

std::string Gateway::MetricsText() const {
  std::string out;
  metrics_.Format(Gauges(), &out);
  return out;
}

std::string Gateway::StatusJson() const {
  using util::Json;
  GatewayGauges g = Gauges();
  std::vector<BackendHealth> health = backends_->Snapshot();
  Json backends = Json::array();
  for (size_t i = 0; i < g.backends.size(); ++i) {
    const BackendGauges& b = g.backends[i];
    Json entry{{"url", b.url},
               {"healthy", b.healthy},
               {"admitted", b.admitted},
               {"inflight", b.inflight},
               {"max_active", b.max_active},
               {"bindings", b.bindings},
               {"consecutive_failures", health[i].consecutive_failures},
               {"last_error", health[i].last_error},
               {"ejections", health[i].ejections},
               {"changed_unix", health[i].changed_unix}};
    if (counters_->shared()) {
      auto total = counters_->Total("backend:" + b.url);
      entry["inflight_all_instances"] = total.ok() ? Json(*total) : Json(nullptr);
    }
    backends.push_back(std::move(entry));
  }
  Admission adm = admission();
  int64_t inflight = 0;
  for (const BackendGauges& b : g.backends) inflight += b.inflight;
  std::string keys_error;
  int64_t keys_loaded = 0;
  int64_t admission_loaded = 0;
  {
    absl::MutexLock lock(&files_mu_);
    keys_error = keys_error_;
    keys_loaded = keys_loaded_unix_;
    admission_loaded = admission_loaded_unix_;
  }
  int64_t bindings = 0;
  for (const BackendGauges& b : g.backends) bindings += b.bindings;
  Json status{
      {"backends", std::move(backends)},
      {"admission", Json{{"open", adm.open},
                         {"reason", adm.reason},
                         {"file", options_.control_path},
                         {"loaded_unix", admission_loaded}}},
      {"inflight", inflight},
      {"queue", Json{{"depth", g.queue_depth},
                     {"max_waiting", g.max_waiting},
                     {"timeout_ms", options_.flow.queue_timeout_ms}}},
      {"slots", Json{{"acquired", g.slots_acquired}, {"released", g.slots_released}}},
      {"keys", Json{{"count", g.keys},
                    {"file", options_.key_store_path},
                    {"loaded_unix", keys_loaded},
                    {"last_error", keys_error.empty() ? Json(nullptr) : Json(keys_error)}}},
      {"bindings", Json{{"count", counters_->shared() ? Json(nullptr) : Json(bindings)},
                        {"ttl_ms", options_.session_ttl_ms},
                        {"store", counters_->shared() ? "redis" : "local"}}},
      {"state", counters_->shared() ? "redis" : "local"},
  };
  if (auto* redis = dynamic_cast<RedisCounterStore*>(counters_.get())) {
    status["instance_id"] = redis->instance_id();
  }
  return util::DumpJson(status);
}

}  // namespace deepinfer::gateway
