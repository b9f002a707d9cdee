#include "gateway/gateway.h"

#include <openssl/crypto.h>

#include <chrono>
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "gateway/redis_state.h"
#include "http/errors.h"
#include "http/request_id.h"
#include "spdlog/spdlog.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/log.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

constexpr int kPoolIdleMs = 4000;

std::string_view RejectionReason(AdmitResult r) {
  switch (r) {
    case AdmitResult::kQueueFull:
      return util::codes::kQueueFull;
    case AdmitResult::kQueueTimeout:
      return util::codes::kQueueTimeout;
    case AdmitResult::kNoBackend:
      return util::codes::kNoHealthyBackend;
    case AdmitResult::kAdmissionClosed:
      return util::codes::kAdmissionClosed;
    case AdmitResult::kStateError:
      return util::codes::kSharedStateUnavailable;
    default:
      return "";
  }
}

absl::Status AdmitError(AdmitResult r, const FlowOptions& flow) {
  switch (r) {
    case AdmitResult::kQueueFull:
      return ResourceExhaustedError(
          util::codes::kQueueFull,
          fmt::format("The gateway is at capacity and its wait queue ({} requests) "
                      "is full; retry later.",
                      flow.max_waiting));
    case AdmitResult::kQueueTimeout:
      return ResourceExhaustedError(
          util::codes::kQueueTimeout,
          fmt::format("No backend became free within {} ms; retry later.", flow.queue_timeout_ms));
    case AdmitResult::kAdmissionClosed:
      return UnavailableError(util::codes::kAdmissionClosed,
                              "The pool admits no new requests (admission closed); retry later.");
    case AdmitResult::kStateError:
      return UnavailableError(util::codes::kSharedStateUnavailable,
                              "The gateway cannot reach its shared state; retry later.");
    default:
      return UnavailableError(util::codes::kNoHealthyBackend,
                              "No healthy admitted backend is available; retry later.");
  }
}

// One per-key concurrency unit, given back on every path.
class KeyLease {
 public:
  KeyLease(CounterStore* store, std::string name) : store_(store), name_(std::move(name)) {}
  ~KeyLease() {
    if (store_ != nullptr) store_->Release(name_);
  }
  KeyLease(const KeyLease&) = delete;
  KeyLease& operator=(const KeyLease&) = delete;

 private:
  CounterStore* store_;
  std::string name_;
};

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Gateway::Gateway(const GatewayOptions& options) : options_(options) {}

Gateway::~Gateway() { Stop(0); }

int Gateway::port() const { return server_ ? server_->port() : 0; }

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(const GatewayOptions& options) {
  std::unique_ptr<Gateway> gateway(new Gateway(options));
  DI_RETURN_IF_ERROR(gateway->Init());
  return gateway;
}

absl::Status Gateway::Init() {
  if (options_.backend_urls.empty()) {
    return InvalidArgumentError(util::codes::kBadFlags, "at least one --backend is required");
  }
  if (options_.key_store_path.empty() || options_.control_path.empty()) {
    return InvalidArgumentError(util::codes::kBadFlags,
                                "--key-store and --control-file are required");
  }
  std::vector<BackendAddress> addresses;
  for (const std::string& url : options_.backend_urls) {
    DI_ASSIGN_OR_RETURN(BackendAddress address, ParseBackendUrl(url));
    for (const BackendAddress& a : addresses) {
      if (a.origin() == address.origin()) {
        return InvalidArgumentError(util::codes::kBadBackendUrl,
                                    "backend listed twice: " + address.origin());
      }
    }
    addresses.push_back(std::move(address));
  }
  backends_ = std::make_unique<BackendTable>(std::move(addresses), options_.health);
  if (!options_.backend_state_path.empty()) {
    auto text = util::ReadFile(options_.backend_state_path);
    if (text.ok()) {
      DI_RETURN_IF_ERROR(backends_->LoadState(*text));
    } else if (text.status().code() != absl::StatusCode::kNotFound) {
      return text.status();
    }
  }

  // Keys: the first load must succeed (there is no last good store to keep).
  {
    keys_signature_ = FileSignature::Of(options_.key_store_path);
    DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(options_.key_store_path));
    DI_ASSIGN_OR_RETURN(std::shared_ptr<const KeyStore> store, KeyStore::Parse(text));
    absl::MutexLock lock(&files_mu_);
    InstallKeys(std::move(store));
    keys_loaded_unix_ = UnixSeconds();
    metrics_.RecordReload("keys", true);
  }

  if (!options_.state_url.empty()) {
    DI_ASSIGN_OR_RETURN(redis_, RedisClient::Connect(options_.state_url, 1000));
    counters_ = std::make_unique<RedisCounterStore>(redis_.get(), options_.redis_prefix);
    bindings_ = std::make_unique<RedisBindingStore>(redis_.get(), options_.redis_prefix,
                                                    options_.session_ttl_ms);
  } else {
    counters_ = std::make_unique<LocalCounterStore>();
    auto local = std::make_unique<LocalBindingStore>(
        options_.bindings_path, options_.session_ttl_ms, options_.max_bindings);
    DI_RETURN_IF_ERROR(local->Load(UnixMillis()));
    bindings_ = std::move(local);
  }
  std::vector<std::string> names;
  for (const BackendAddress& a : backends_->addresses()) names.push_back("backend:" + a.origin());
  flow_ = std::make_unique<FlowControl>(options_.flow, std::move(names), counters_.get());
  if (options_.upstream_keepalive) {
    pool_ = std::make_unique<UpstreamPool>(
        static_cast<size_t>(std::max(options_.flow.max_active_per_backend, 1)), kPoolIdleMs);
  }

  control_signature_ = FileSignature::Of(options_.control_path);
  ReloadAdmission();
  // One probe of every backend before listening, in parallel, so that a dead backend is out
  // of rotation from the first request.
  {
    std::vector<std::thread> probes;
    for (size_t i = 0; i < backends_->size(); ++i) probes.emplace_back([this, i] { ProbeOnce(i); });
    for (std::thread& t : probes) t.join();
  }
  UpdateEligibility();
  WriteBackendState();

  // Every answer carries X-Request-Id, the gateway's own ones included (/health, 401s, ...).
  http::ServerOptions front = options_.front;
  front.request_ids = true;
  front.request_id_prefix = "gw-";
  DI_ASSIGN_OR_RETURN(server_, http::Server::Start(front, [this](const http::Request& r,
                                                                 http::ResponseWriter& w) {
                        Handle(r, w);
                      }));
  for (size_t i = 0; i < backends_->size(); ++i) threads_.emplace_back([this, i] { ProbeLoop(i); });
  threads_.emplace_back([this] { WatchLoop(); });
  return absl::OkStatus();
}

bool Gateway::Stop(int drain_timeout_ms) {
  bool all = true;
  if (server_) all = server_->Stop(drain_timeout_ms);
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  if (bindings_) bindings_->Flush(UnixMillis());
  return all;
}

void Gateway::RespondError(http::ResponseWriter& writer, const http::Headers& extra,
                           const absl::Status& status, int retry_after_s) {
  http::ApiError error = GatewayError(status);
  http::Headers headers = extra;
  headers.emplace_back("Content-Type", "application/json");
  if (error.http_status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  if (error.http_status == 429 || error.http_status == 503) {
    headers.emplace_back("Retry-After", std::to_string(std::max(retry_after_s, 1)));
  } else if (error.http_status >= 400 && error.http_status < 500) {
    // The OpenAI and Anthropic SDKs honour this and stop retrying a request that cannot succeed.
    headers.emplace_back("x-should-retry", "false");
  }
  writer.Respond(error.http_status, headers, http::ErrorBodyForPath(error, writer.request_path()));
}

const KeyRecord* Gateway::Authenticate(const http::Request& request, http::ResponseWriter& writer,
                                       const http::Headers& extra) {
  std::string_view presented =
      PresentedKey(request.Header("authorization"), request.Header("x-api-key"));
  // Clients present the same key with every request: the key this thread verified last is
  // accepted again without a SHA-256 while the key store is the one it was verified against
  // (its generation, unique in the process, so two gateways in one process never share an
  // entry), compared in constant time, with its expiry checked again. One atomic load instead
  // of the store's lock and reference count, which every request would otherwise write.
  struct VerifiedKey {
    uint64_t generation = 0;  // 0: none
    std::string presented;
    KeyRecord key;
  };
  thread_local VerifiedKey last;
  if (!presented.empty() && presented.size() == last.presented.size() &&
      keys_generation_.load(std::memory_order_acquire) == last.generation &&
      CRYPTO_memcmp(presented.data(), last.presented.data(), presented.size()) == 0 &&
      (last.key.expires_unix == 0 || UnixSeconds() < last.key.expires_unix)) {
    return &last.key;
  }
  auto [store, generation] = KeysAndGeneration();
  AuthOutcome outcome = store->Authenticate(presented, UnixSeconds());
  if (outcome.result == AuthResult::kOk) {
    last = VerifiedKey{generation, std::string(presented), std::move(outcome.key)};
    return &last.key;
  }
  metrics_.RecordRejection("unauthorized");
  absl::Status status;
  switch (outcome.result) {
    case AuthResult::kMissing:
      // Anthropic clients send their key as x-api-key; both headers are accepted.
      status = MakeError(absl::StatusCode::kUnauthenticated, util::codes::kMissingApiKey,
                         http::IsAnthropicPath(writer.request_path())
                             ? "Missing API key: send it as 'x-api-key: <key>' (or "
                               "'Authorization: Bearer <key>')."
                             : "Missing API key: send it as 'Authorization: Bearer <key>'.");
      break;
    case AuthResult::kExpired:
      status = MakeError(absl::StatusCode::kUnauthenticated, util::codes::kExpiredApiKey,
                         "The API key has expired.");
      break;
    default:
      status = MakeError(absl::StatusCode::kUnauthenticated, util::codes::kInvalidApiKey,
                         "Incorrect API key provided.");
  }
  RespondError(writer, extra, status);
  return nullptr;
}

void Gateway::Handle(const http::Request& request, http::ResponseWriter& writer) {
  const auto start = Clock::now();
  // The server chose it (ServerOptions::request_ids); a Gateway driven without its server, as
  // in tests, chooses here the same way.
  const std::string request_id = !writer.log().request_id.empty()
                                     ? writer.log().request_id
                                     : http::RequestIdFor(request, "gw-");
  const http::Headers extra = {{"x-request-id", request_id}};
  const std::string& path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";

  if (path == "/health" || path == "/metrics") {
    if (!get) {
      RespondError(writer, extra, http::MethodNotAllowedError(request.method, path));
    } else if (path == "/health") {
      writer.Respond(200, {{"Content-Type", "application/json"}}, "{\"status\":\"ok\"}");
    } else {
      writer.Respond(200, {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}},
                     MetricsText());
    }
    return;
  }
  if (path == "/gateway/status") {
    // Counted like API requests (401 and 403 included), so that rejections_total never
    // exceeds requests_total.
    if (const KeyRecord* key = Authenticate(request, writer, extra)) {  // else it answered 401
      if (!key->admin) {
        RespondError(writer, extra,
                     MakeError(absl::StatusCode::kPermissionDenied, util::codes::kAdminKeyRequired,
                               "This endpoint needs a key with admin rights."));
      } else {
        http::Headers headers = extra;
        headers.emplace_back("Content-Type", "application/json");
        writer.Respond(200, headers, StatusJson());
      }
    }
    metrics_.RecordRequest(writer.status(), "");
    return;
  }
  if (path.rfind("/v1/", 0) != 0) {
    RespondError(writer, extra, http::RouteNotFoundError(path));
    metrics_.RecordRequest(writer.status(), "");
    return;
  }
  HandleProxy(request, writer, extra, start);
}

// One proxied request on its way through HandleProxy's parts: where it came from, what the
// metrics get (the routing part once the request is with its backend, the rest when it ends),
// its session's binding, and the key lease and backend slot it holds until it ends.
struct Gateway::ProxyCall {
  ProxyCall(const http::Request& request, http::ResponseWriter& writer,
            const http::Headers& extra, Clock::time_point start)
      : request(request), writer(writer), extra(extra), start(start),
        client_gone([&writer] { return writer.PeerClosed(); }) {}

  const http::Request& request;
  http::ResponseWriter& writer;
  const http::Headers& extra;  // front(): the x-request-id
  const Clock::time_point start;
  const std::function<bool()> client_gone;
  ProxiedRequest record;
  std::string served_by;  // the backend's origin once one answered
  SessionId session;
  int preferred = -1;    // the session's bound backend, or -1
  bool bound = false;    // the session had a binding
  bool spilled = false;  // the bound backend was only busy, so the session stays home
  std::unique_ptr<KeyLease> lease;
  Slot slot;
};

void Gateway::HandleProxy(const http::Request& request, http::ResponseWriter& writer,
                          const http::Headers& extra, Clock::time_point start) {
  ProxyCall call(request, writer, extra, start);
  FinishProxy(call, Proxy(call));
}

int Gateway::Proxy(ProxyCall& call) {
  const KeyRecord* const key = Authenticate(call.request, call.writer, call.extra);
  if (key == nullptr) return call.writer.status();
  call.record.key_id = key->id;
  if (call.request.path == "/v1/models" &&
      (call.request.method == "GET" || call.request.method == "HEAD")) {
    HandleModels(call.writer, call.extra);
    return call.writer.status();
  }
  BodyInfo body;
  if (!call.request.body.empty()) body = InspectBody(call.request.body);
  if (absl::Status check = PreCheck(body, options_.limits); !check.ok()) {
    metrics_.RecordRejection(util::codes::kContextLengthExceeded);
    RespondError(call.writer, call.extra, check);
    return call.writer.status();
  }
  if (std::optional<int> refused = LeaseKey(*key, call)) return *refused;
  FindSession(*key, body, call);

  AcquireResult admit = flow_->Acquire({call.preferred, -1}, call.client_gone);
  call.record.queue_wait_seconds = admit.waited_seconds;
  if (std::optional<int> refused = CheckAdmitted(call, admit.result)) return *refused;
  call.slot = std::move(admit.slot);
  call.spilled = admit.spilled;
  call.record.overhead_seconds = std::max(0.0, SecondsSince(call.start) - admit.waited_seconds);
  ProxyResult result = Forward(call);
  if (result.end == ProxyEnd::kConnectFailed) {
    if (std::optional<int> ended = RetryElsewhere(call, admit.spilled, &result)) return *ended;
  }
  call.served_by = backends_->address(call.slot.backend()).origin();
  switch (result.end) {
    case ProxyEnd::kClientGone:
      metrics_.RecordCancellation(result.phase);
      call.writer.Abort();
      return 499;
    case ProxyEnd::kBackendFailed:
    case ProxyEnd::kBackendTimeout:
      metrics_.RecordBackendError(call.served_by,
                                  result.end == ProxyEnd::kBackendTimeout
                                      ? "timeout"
                                      : (result.client_started ? "stream" : "reply"));
      std::fprintf(stderr, "deepinfer gateway: %s: request %s failed: %s\n",
                   call.served_by.c_str(), call.extra.front().second.c_str(),
                   result.error.c_str());
      return result.status != 0 ? result.status : 502;
    default:
      return result.status;
  }
}

void Gateway::FinishProxy(ProxyCall& call, int status) {
  ProxiedRequest& record = call.record;
  record.status = status;
  record.backend = call.served_by;
  record.duration_seconds = SecondsSince(call.start);
  metrics_.RecordProxied(record);
  if (!options_.log_requests) return;
  spdlog::info(
      "request {} {} {} {:.1f}ms key={} backend={} affinity={} queue_ms={:.1f} "
      "x_request_id={}",
      util::PrintableForLog(call.request.method), util::PrintableForLog(call.request.path),
      status, record.duration_seconds * 1e3, record.key_id.empty() ? "-" : record.key_id,
      call.served_by.empty() ? "-" : call.served_by,
      record.affinity.empty() ? "none" : record.affinity,
      record.queue_wait_seconds.value_or(0) * 1e3,
      util::PrintableForLog(call.extra.front().second));
}

std::optional<int> Gateway::LeaseKey(const KeyRecord& key, ProxyCall& call) {
  if (key.max_concurrent <= 0) return std::nullopt;
  std::string name = "key:" + key.id;
  absl::StatusOr<int> got = counters_->TryAcquire({name}, key.max_concurrent);
  if (got.ok() && *got >= 0) {
    call.lease = std::make_unique<KeyLease>(counters_.get(), name);
    return std::nullopt;
  }
  const bool state_error = !got.ok();
  metrics_.RecordRejection(state_error ? util::codes::kSharedStateUnavailable
                                       : util::codes::kKeyConcurrencyExceeded);
  RespondError(call.writer, call.extra,
               state_error ? AdmitError(AdmitResult::kStateError, options_.flow)
                           : ResourceExhaustedError(
                                 util::codes::kKeyConcurrencyExceeded,
                                 fmt::format("Key '{}' already has {} requests in flight.",
                                             key.id, key.max_concurrent)),
               1);
  return call.writer.status();
}

void Gateway::FindSession(const KeyRecord& key, const BodyInfo& body, ProxyCall& call) {
  call.session = ExtractSession(key.id, call.request.Header(options_.session_header), body);
  if (call.session.key.empty()) return;
  auto found = bindings_->Lookup(call.session.key, UnixMillis());
  if (found.ok() && found->has_value()) {
    call.bound = true;
    call.preferred = backends_->IndexOf(**found);
  }
}

std::optional<int> Gateway::CheckAdmitted(ProxyCall& call, AdmitResult result) {
  if (result == AdmitResult::kOk) return std::nullopt;
  if (result == AdmitResult::kCancelled) {
    metrics_.RecordCancellation("queued");
    call.writer.Abort();
    return 499;
  }
  metrics_.RecordRejection(RejectionReason(result));
  RespondError(call.writer, call.extra, AdmitError(result, options_.flow),
               flow_->RetryAfterSeconds());
  return call.writer.status();
}

void Gateway::RecordRouting(ProxyCall& call) {
  // The session's binding is written once the request is with its backend, while the backend
  // works: a bound session's lookup is all the routing needs, and a binding store write (a Redis
  // round trip with --state) then adds nothing to latency.
  const int backend = call.slot.backend();
  ProxiedRequest& record = call.record;
  if (call.session.key.empty()) {
    record.affinity = "none";
  } else if (!call.bound) {
    record.affinity = "new";
    (void)bindings_->BindIfAbsent(call.session.key, backends_->address(backend).origin(),
                                  UnixMillis());
  } else if (backend == call.preferred) {
    record.affinity = "hit";
  } else if (call.spilled) {
    record.affinity = "spill";
  } else {
    record.affinity = "rebind";
    (void)bindings_->Rebind(call.session.key, backends_->address(backend).origin(),
                            UnixMillis());
  }
  metrics_.RecordRouted(record);
  record.routing_recorded = true;
}

ProxyResult Gateway::Forward(ProxyCall& call) {
  return ProxyRequest(backends_->address(call.slot.backend()), call.request,
                      call.extra.front().second, call.extra, call.writer, options_.upstream,
                      pool_.get(), [&] { RecordRouting(call); });
}

std::optional<int> Gateway::RetryElsewhere(ProxyCall& call, bool first_spilled,
                                           ProxyResult* result) {
  // Nothing was sent anywhere (so no binding was written): eject the backend and try once more
  // elsewhere.
  const int failed = call.slot.backend();
  const std::string& failed_url = backends_->address(failed).origin();
  std::fprintf(stderr, "deepinfer gateway: %s: connect failed (%s); ejected, retrying\n",
               failed_url.c_str(), result->error.c_str());
  metrics_.RecordBackendError(failed_url, "connect");
  if (backends_->Eject(failed, result->error, UnixSeconds())) OnHealthChange(failed);
  call.slot.Release();
  metrics_.RecordRetry();
  AcquireResult again = flow_->Acquire({-1, failed}, call.client_gone);
  if (std::optional<int> refused = CheckAdmitted(call, again.result)) return refused;
  call.slot = std::move(again.slot);
  // A session bound to the failed backend moves to this one; one that had spilled away from its
  // busy home stays bound there.
  call.spilled = call.bound && call.preferred != failed && first_spilled;
  *result = Forward(call);
  if (result->end != ProxyEnd::kConnectFailed) return std::nullopt;
  const int second = call.slot.backend();
  metrics_.RecordBackendError(backends_->address(second).origin(), "connect");
  if (backends_->Eject(second, result->error, UnixSeconds())) OnHealthChange(second);
  RespondError(call.writer, call.extra,
               UnavailableError(util::codes::kBackendUnavailable,
                                "No backend accepted the connection; retry later."),
               flow_->RetryAfterSeconds());
  return call.writer.status();
}

void Gateway::HandleModels(http::ResponseWriter& writer, const http::Headers& extra) {
  Admission adm = admission();
  std::vector<bool> healthy = backends_->HealthyMask();
  util::Json data = util::Json::array();
  std::vector<std::string> seen;
  bool any = false;
  for (size_t i = 0; i < backends_->size(); ++i) {
    if (!adm.admitted[i] || !healthy[i]) continue;
    any = true;
    auto response = HttpGet(backends_->address(i), "/v1/models", options_.health_timeout_ms);
    if (!response.ok() || response->status != 200) continue;
    auto json = util::ParseJson(response->body);
    if (!json.ok() || !json->is_object() || !json->contains("data") ||
        !(*json)["data"].is_array()) {
      continue;
    }
    for (const auto& model : (*json)["data"]) {
      if (!model.is_object() || !model.contains("id") || !model["id"].is_string()) continue;
      std::string id = model["id"].get<std::string>();
      if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
      data.push_back(model);
    }
  }
  if (!any) {
    AdmitResult r = adm.open ? AdmitResult::kNoBackend : AdmitResult::kAdmissionClosed;
    metrics_.RecordRejection(RejectionReason(r));
    RespondError(writer, extra, AdmitError(r, options_.flow), flow_->RetryAfterSeconds());
    return;
  }
  http::Headers headers = extra;
  headers.emplace_back("Content-Type", "application/json");
  writer.Respond(200, headers,
                 util::DumpJson(util::Json{{"object", "list"}, {"data", std::move(data)}}));
}

}  // namespace deepinfer::gateway
