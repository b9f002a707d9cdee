#include "gateway/redis_state.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/time/time.h"
#include "fmt/format.h"
#include "openssl/rand.h"
#include "util/error_codes.h"
#include "util/status.h"

#ifdef DI_GATEWAY_HAVE_HIREDIS
#include "hiredis/hiredis.h"
#endif

namespace deepinfer::gateway {
namespace {

constexpr int kHeartbeatMs = 1000;
constexpr int kLivenessMs = 5000;

// KEYS: counter hashes in preference order. ARGV: instance id, cap, liveness key prefix.
// Returns the 0-based index of the key that took a unit, or -1.
constexpr const char* kAcquireScript = R"lua(
local best = -1
local best_total = 0
for k = 1, #KEYS do
  local fields = redis.call('HGETALL', KEYS[k])
  local total = 0
  for i = 1, #fields, 2 do
    if redis.call('EXISTS', ARGV[3] .. fields[i]) == 1 then
      total = total + tonumber(fields[i + 1])
    else
      redis.call('HDEL', KEYS[k], fields[i])
    end
  end
  if total < tonumber(ARGV[2]) and (best < 0 or total < best_total) then
    best = k - 1
    best_total = total
  end
end
if best >= 0 then redis.call('HINCRBY', KEYS[best + 1], ARGV[1], 1) end
return best
)lua";

// KEYS[1]: counter hash. ARGV[1]: liveness key prefix. Returns the units of live instances.
constexpr const char* kTotalScript = R"lua(
local fields = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #fields, 2 do
  if redis.call('EXISTS', ARGV[1] .. fields[i]) == 1 then
    total = total + tonumber(fields[i + 1])
  end
end
return total
)lua";

std::string NewInstanceId() {
  uint8_t bytes[6] = {};
  RAND_bytes(bytes, sizeof(bytes));
  std::string out = fmt::format("{}-", ::getpid());
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

absl::Status Unreachable(std::string_view what) {
  return UnavailableError(util::codes::kSharedStateUnavailable,
                          fmt::format("Shared state (Redis) unavailable: {}", what));
}

}  // namespace

#ifdef DI_GATEWAY_HAVE_HIREDIS

bool RedisSupported() { return true; }

namespace {

RedisValue Convert(const redisReply* reply) {
  RedisValue v;
  switch (reply->type) {
    case REDIS_REPLY_INTEGER:
      v.type = RedisValue::Type::kInteger;
      v.integer = reply->integer;
      break;
    case REDIS_REPLY_STRING:
      v.type = RedisValue::Type::kString;
      v.text.assign(reply->str, reply->len);
      break;
    case REDIS_REPLY_STATUS:
      v.type = RedisValue::Type::kStatus;
      v.text.assign(reply->str, reply->len);
      break;
    case REDIS_REPLY_ERROR:
      v.type = RedisValue::Type::kError;
      v.text.assign(reply->str, reply->len);
      break;
    case REDIS_REPLY_ARRAY:
      v.type = RedisValue::Type::kArray;
      for (size_t i = 0; i < reply->elements; ++i) v.elements.push_back(Convert(reply->element[i]));
      break;
    default:
      v.type = RedisValue::Type::kNil;
  }
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisClient>> RedisClient::Connect(std::string_view url,
                                                                  int timeout_ms) {
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return InvalidArgumentError(util::codes::kBadStateUrl,
                                "--state must look like redis://HOST:PORT[/DB]");
  }
  std::string rest(url.substr(kScheme.size()));
  int db = 0;
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    std::string db_text = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db_text.empty()) {
      char* end = nullptr;
      long v = std::strtol(db_text.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v > 1000) {
        return InvalidArgumentError(util::codes::kBadStateUrl, "bad Redis database number");
      }
      db = static_cast<int>(v);
    }
  }
  size_t colon = rest.rfind(':');
  std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
  int port = 6379;
  if (colon != std::string::npos) {
    char* end = nullptr;
    long v = std::strtol(rest.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || v < 1 || v > 65535) {
      return InvalidArgumentError(util::codes::kBadStateUrl, "bad Redis port");
    }
    port = static_cast<int>(v);
  }
  if (host.empty()) return InvalidArgumentError(util::codes::kBadStateUrl, "no Redis host");
  std::unique_ptr<RedisClient> client(new RedisClient(host, port, db, timeout_ms));
  absl::MutexLock lock(&client->mu_);
  DI_RETURN_IF_ERROR(client->ConnectLocked());
  return client;
}

RedisClient::~RedisClient() {
  absl::MutexLock lock(&mu_);  // no other user is left; the lock is for the analysis
  if (context_ != nullptr) redisFree(context_);
}

absl::Status RedisClient::ConnectLocked() {
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  timeval tv{timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
  redisContext* c = redisConnectWithTimeout(host_.c_str(), port_, tv);
  if (c == nullptr || c->err) {
    std::string why = c == nullptr ? "out of memory" : c->errstr;
    if (c != nullptr) redisFree(c);
    return Unreachable(fmt::format("{}:{}: {}", host_, port_, why));
  }
  redisSetTimeout(c, tv);
  context_ = c;
  if (db_ != 0) {
    auto* reply = static_cast<redisReply*>(redisCommand(c, "SELECT %d", db_));
    bool ok = reply != nullptr && reply->type != REDIS_REPLY_ERROR;
    if (reply != nullptr) freeReplyObject(reply);
    if (!ok) return Unreachable("SELECT failed");
  }
  return absl::OkStatus();
}

absl::StatusOr<RedisValue> RedisClient::Command(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  absl::MutexLock lock(&mu_);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (context_ == nullptr || context_->err) {
      absl::Status status = ConnectLocked();
      if (!status.ok()) return status;
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (reply == nullptr) {
      // The connection broke (or timed out); reconnect once and retry.
      redisFree(context_);
      context_ = nullptr;
      continue;
    }
    RedisValue value = Convert(reply);
    freeReplyObject(reply);
    if (value.type == RedisValue::Type::kError) {
      return InternalError(util::codes::kRedisError, fmt::format("Redis: {}", value.text));
    }
    return value;
  }
  return Unreachable("no reply");
}

#else  // !DI_GATEWAY_HAVE_HIREDIS

bool RedisSupported() { return false; }

absl::StatusOr<std::unique_ptr<RedisClient>> RedisClient::Connect(std::string_view, int) {
  return UnimplementedError(util::codes::kNoRedis,
                            "This build has no Redis support (libhiredis-dev).");
}
RedisClient::~RedisClient() = default;
absl::Status RedisClient::ConnectLocked() { return Unreachable("no Redis support"); }
absl::StatusOr<RedisValue> RedisClient::Command(const std::vector<std::string>&) {
  return Unreachable("no Redis support");
}

#endif  // DI_GATEWAY_HAVE_HIREDIS

RedisCounterStore::RedisCounterStore(RedisClient* client, std::string prefix)
    : client_(client), prefix_(std::move(prefix)), instance_id_(NewInstanceId()) {
  absl::Status status = Heartbeat();
  if (!status.ok()) {
    std::fprintf(stderr, "deepinfer gateway: %s\n", OneLineError(status).c_str());
  }
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

RedisCounterStore::~RedisCounterStore() {
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  stop_cv_.SignalAll();
  if (heartbeat_.joinable()) heartbeat_.join();
  absl::MutexLock lock(&mu_);
  for (const auto& [name, count] : local_) {
    (void)client_->Command({"HDEL", prefix_ + "c:" + name, instance_id_});
  }
  (void)client_->Command({"DEL", prefix_ + "i:" + instance_id_});
}

void RedisCounterStore::HeartbeatLoop() {
  absl::MutexLock lock(&stop_mu_);
  while (!stop_) {
    stop_cv_.WaitWithTimeout(&stop_mu_, absl::Milliseconds(kHeartbeatMs));
    if (stop_) break;
    stop_mu_.Unlock();
    absl::Status status = Heartbeat();
    if (!status.ok()) {
      std::fprintf(stderr, "deepinfer gateway: heartbeat: %s\n", OneLineError(status).c_str());
    }
    stop_mu_.Lock();
  }
}

absl::Status RedisCounterStore::Heartbeat() {
  absl::MutexLock lock(&mu_);
  DI_RETURN_IF_ERROR(
      client_
          ->Command({"SET", prefix_ + "i:" + instance_id_, "1", "PX", std::to_string(kLivenessMs)})
          .status());
  for (const auto& [name, count] : local_) {
    std::string key = prefix_ + "c:" + name;
    if (count > 0) {
      DI_RETURN_IF_ERROR(
          client_->Command({"HSET", key, instance_id_, std::to_string(count)}).status());
    } else {
      DI_RETURN_IF_ERROR(client_->Command({"HDEL", key, instance_id_}).status());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RedisCounterStore::TryAcquire(const std::vector<std::string>& names, int cap) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> args = {"EVAL", kAcquireScript, std::to_string(names.size())};
  for (const std::string& name : names) args.push_back(prefix_ + "c:" + name);
  args.push_back(instance_id_);
  args.push_back(std::to_string(cap));
  args.push_back(prefix_ + "i:");
  auto reply = client_->Command(args);
  if (!reply.ok()) return Unreachable(std::string(reply.status().message()));
  if (reply->type != RedisValue::Type::kInteger) return Unreachable("unexpected script reply");
  int index = static_cast<int>(reply->integer);
  if (index >= 0 && index < static_cast<int>(names.size())) local_[names[index]]++;
  return index < static_cast<int>(names.size()) ? index : -1;
}

void RedisCounterStore::Release(const std::string& name) {
  absl::MutexLock lock(&mu_);
  int64_t& count = local_[name];
  if (count > 0) count--;
  std::string key = prefix_ + "c:" + name;
  // Writing the local truth (not a decrement) keeps a lost reply from drifting the total.
  auto reply = count > 0 ? client_->Command({"HSET", key, instance_id_, std::to_string(count)})
                         : client_->Command({"HDEL", key, instance_id_});
  (void)reply;  // a failure is repaired by the next heartbeat
}

absl::StatusOr<int64_t> RedisCounterStore::Total(const std::string& name) {
  auto reply = client_->Command({"EVAL", kTotalScript, "1", prefix_ + "c:" + name, prefix_ + "i:"});
  if (!reply.ok()) return reply.status();
  return reply->integer;
}

RedisBindingStore::RedisBindingStore(RedisClient* client, std::string prefix, int64_t ttl_ms)
    : client_(client), prefix_(std::move(prefix)), ttl_ms_(ttl_ms) {}

absl::StatusOr<std::optional<std::string>> RedisBindingStore::Lookup(const std::string& session,
                                                                     int64_t now_ms) {
  DI_ASSIGN_OR_RETURN(RedisValue v, client_->Command({"GETEX", prefix_ + "b:" + session, "PX",
                                                      std::to_string(ttl_ms_)}));
  if (v.type != RedisValue::Type::kString) return std::optional<std::string>();
  return std::optional<std::string>(v.text);
}

absl::StatusOr<std::string> RedisBindingStore::BindIfAbsent(const std::string& session,
                                                            const std::string& backend_url,
                                                            int64_t now_ms) {
  std::string key = prefix_ + "b:" + session;
  DI_ASSIGN_OR_RETURN(RedisValue set, client_->Command({"SET", key, backend_url, "NX", "PX",
                                                        std::to_string(ttl_ms_)}));
  if (set.type != RedisValue::Type::kNil) return backend_url;
  DI_ASSIGN_OR_RETURN(RedisValue current, client_->Command({"GET", key}));
  return current.type == RedisValue::Type::kString ? current.text : backend_url;
}

absl::Status RedisBindingStore::Rebind(const std::string& session, const std::string& backend_url,
                                       int64_t now_ms) {
  return client_
      ->Command({"SET", prefix_ + "b:" + session, backend_url, "PX", std::to_string(ttl_ms_)})
      .status();
}

}  // namespace deepinfer::gateway
