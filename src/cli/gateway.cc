// `deepinfer gateway`: the pool router (flag parsing only; the work is in src/gateway), and
// `deepinfer gateway add-key`, which creates an API key and stores only its digest.

#include "gateway/gateway.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "fmt/format.h"
#include "gateway/key_store.h"
#include "util/log.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

struct GatewayFlags {
  std::string listen = "127.0.0.1";
  int port = 19010;
  std::vector<std::string> backends;
  std::vector<int> backend_ports;
  int max_active_per_backend = 32;
  int max_waiting = 32;
  double queue_timeout_s = 5;
  int64_t model_context_limit = 1048576;
  int max_bytes_per_token = 32;
  std::string key_store;
  std::string bindings_file;
  std::string backend_state;
  std::string control_file;
  std::string state;
  std::string redis_prefix = "deepinfer:gw:";
  std::string session_header = "X-Session-Id";
  double session_ttl_s = 3600;
  int affinity_patience_ms = 500;
  int health_interval_ms = 1000;
  int health_timeout_ms = 2000;
  int health_failures = 3;
  int health_successes = 2;
  int connect_timeout_ms = 2000;
  double header_timeout_s = 600;
  double idle_timeout_s = 300;
  int64_t max_request_mib = 32;
  int max_connections = 4096;
  double drain_timeout_s = 30;
  bool log_requests = false;
};

struct AddKeyFlags {
  std::string key_store;
  std::string id;
  int max_concurrent = 0;
  double expires_in_days = 0;
  bool admin = false;
};

int RunGateway(const GatewayFlags& f) {
  gateway::GatewayOptions o;
  o.backend_urls = f.backends;
  for (int port : f.backend_ports)
    o.backend_urls.push_back(fmt::format("http://127.0.0.1:{}", port));
  o.front.host = f.listen;
  o.front.port = f.port;
  o.front.max_request_bytes = f.max_request_mib << 20;
  o.front.max_connections = f.max_connections;
  o.flow.max_active_per_backend = f.max_active_per_backend;
  o.flow.max_waiting = f.max_waiting;
  o.flow.queue_timeout_ms = static_cast<int>(std::lround(f.queue_timeout_s * 1000));
  o.flow.affinity_patience_ms = f.affinity_patience_ms;
  o.upstream.connect_timeout_ms = f.connect_timeout_ms;
  o.upstream.header_timeout_ms = static_cast<int>(std::lround(f.header_timeout_s * 1000));
  o.upstream.idle_timeout_ms = static_cast<int>(std::lround(f.idle_timeout_s * 1000));
  o.limits.model_context_limit = f.model_context_limit;
  o.limits.max_bytes_per_token = f.max_bytes_per_token;
  o.health.failure_threshold = f.health_failures;
  o.health.success_threshold = f.health_successes;
  o.health_interval_ms = f.health_interval_ms;
  o.health_timeout_ms = f.health_timeout_ms;
  o.key_store_path = f.key_store;
  o.control_path = f.control_file;
  o.bindings_path = f.bindings_file;
  o.backend_state_path = f.backend_state;
  o.state_url = f.state;
  o.redis_prefix = f.redis_prefix;
  o.session_header = f.session_header;
  for (char& c : o.session_header)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  o.session_ttl_ms = static_cast<int64_t>(f.session_ttl_s * 1000);

  // Threads created from here on inherit the mask, so only sigtimedwait sees these signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  o.log_requests = f.log_requests;
  util::InitLogging();
  auto gw = gateway::Gateway::Start(o);
  if (!gw.ok()) {
    return ReportFailure("gateway", gw.status(), "cannot start");
  }
  std::fprintf(stderr, "deepinfer gateway: listening on http://%s:%d, %zu backend(s), state %s\n",
               f.listen.c_str(), (*gw)->port(), o.backend_urls.size(),
               f.state.empty() ? "local" : "redis");
  while (true) {
    timespec ts{1, 0};
    int sig = sigtimedwait(&signals, nullptr, &ts);
    if (sig == SIGHUP) {
      std::fprintf(stderr, "deepinfer gateway: SIGHUP, reloading files\n");
      (*gw)->ReloadNow();
      continue;
    }
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "deepinfer gateway: signal %d, draining\n", sig);
      break;
    }
  }
  bool drained = (*gw)->Stop(static_cast<int>(f.drain_timeout_s * 1000));
  if (!drained) {
    std::fprintf(stderr, "deepinfer gateway: requests still in flight after the drain timeout\n");
    std::fflush(stderr);
    std::_Exit(0);
  }
  gw->reset();
  return 0;
}

int RunAddKey(const AddKeyFlags& f) {
  gateway::NewKeyOptions options;
  options.id = f.id;
  options.max_concurrent = f.max_concurrent;
  options.admin = f.admin;
  if (f.expires_in_days > 0) {
    options.expires_unix = gateway::UnixSeconds() + static_cast<int64_t>(f.expires_in_days * 86400);
  }
  auto key = gateway::AddKeyToFile(f.key_store, options);
  if (!key.ok()) {
    return ReportFailure("gateway add-key", key.status());
  }
  // The key goes to stdout alone (for scripts); it is stored nowhere and cannot be shown again.
  std::printf("%s\n", key->c_str());
  std::fflush(stdout);
  std::fprintf(stderr,
               "deepinfer gateway add-key: key '%s' added to %s (only its SHA-256 is stored; "
               "this is the only time the key is shown)\n",
               f.id.c_str(), f.key_store.c_str());
  return 0;
}

}  // namespace

void RegisterGateway(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<GatewayFlags>();
  CLI::App* cmd =
      app.add_subcommand("gateway", "pool router in front of several `deepinfer serve` backends");
  cmd->add_option("--listen", flags->listen, "address to listen on")->capture_default_str();
  cmd->add_option("--port", flags->port, "TCP port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--backend", flags->backends, "backend URL http://HOST:PORT (repeatable)");
  cmd->add_option("--backend-port", flags->backend_ports,
                  "backend at http://127.0.0.1:PORT (repeatable)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--max-active-per-backend", flags->max_active_per_backend,
                  "requests in flight per backend")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--max-waiting", flags->max_waiting, "wait queue length (0: no queue)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_option("--queue-timeout", flags->queue_timeout_s, "longest wait in the queue, seconds")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--model-context-limit", flags->model_context_limit,
                  "requests whose max_tokens (or prompt lower bound) exceed this get 400")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--max-bytes-per-token", flags->max_bytes_per_token,
                  "prompt lower bound: text bytes / this")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--key-store", flags->key_store, "API key digests (see `gateway add-key`)");
  cmd->add_option("--control-file", flags->control_file,
                  "admission file {\"admit\": [backend URLs]}; missing/empty/invalid: closed");
  cmd->add_option("--bindings-file", flags->bindings_file, "session bindings (local state)");
  cmd->add_option("--backend-state", flags->backend_state, "backend health, written atomically");
  cmd->add_option("--state", flags->state, "shared state for several gateways: redis://HOST:PORT");
  cmd->add_option("--redis-prefix", flags->redis_prefix, "key prefix in Redis")
      ->capture_default_str();
  cmd->add_option("--session-header", flags->session_header, "header carrying the session id")
      ->capture_default_str();
  cmd->add_option("--session-ttl", flags->session_ttl_s, "idle seconds before a binding expires")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--affinity-patience-ms", flags->affinity_patience_ms,
                  "how long a session waits for its full backend before spilling")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  cmd->add_option("--health-interval-ms", flags->health_interval_ms, "probe interval")
      ->check(CLI::Range(50, 3600000))
      ->capture_default_str();
  cmd->add_option("--health-timeout-ms", flags->health_timeout_ms, "probe timeout")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str();
  cmd->add_option("--health-failures", flags->health_failures,
                  "failed probes in a row that eject a backend")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--health-successes", flags->health_successes,
                  "good probes in a row that bring it back")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--connect-timeout-ms", flags->connect_timeout_ms, "backend connect timeout")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();
  cmd->add_option("--header-timeout", flags->header_timeout_s,
                  "seconds a backend may take to start answering")
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  cmd->add_option("--idle-timeout", flags->idle_timeout_s,
                  "longest silence inside an answer, seconds")
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  cmd->add_option("--max-request-mib", flags->max_request_mib, "largest request body, MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--max-connections", flags->max_connections, "open client connections")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--drain-timeout", flags->drain_timeout_s,
                  "seconds in-flight requests get at shutdown")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_flag("--log-requests", flags->log_requests,
                "one stderr line per proxied request: status, duration, key id, backend, "
                "affinity, queue wait, x-request-id (never the key or the body; off by default)");

  auto key_flags = std::make_shared<AddKeyFlags>();
  CLI::App* add_key =
      cmd->add_subcommand("add-key", "create an API key: prints it once, stores only its SHA-256");
  add_key->add_option("--key-store", key_flags->key_store, "key store file (created if missing)")
      ->required();
  add_key->add_option("--id", key_flags->id, "key id shown in logs and metrics")->required();
  add_key
      ->add_option("--max-concurrent", key_flags->max_concurrent,
                   "requests in flight at once with this key (0: no limit)")
      ->check(CLI::Range(0, 1 << 20));
  add_key
      ->add_option("--expires-in-days", key_flags->expires_in_days,
                   "key expires after this many days (0: never)")
      ->check(CLI::Range(0.0, 36500.0));
  add_key->add_flag("--admin", key_flags->admin, "may read /gateway/status");
  add_key->callback([key_flags, exit_code] { *exit_code = RunAddKey(*key_flags); });

  cmd->callback([flags, add_key, exit_code] {
    if (add_key->parsed()) return;
    if (flags->backends.empty() && flags->backend_ports.empty()) {
      std::fprintf(stderr, "deepinfer gateway: bad_flags: give at least one --backend\n");
      *exit_code = 2;
      return;
    }
    if (flags->key_store.empty() || flags->control_file.empty()) {
      std::fprintf(stderr,
                   "deepinfer gateway: bad_flags: --key-store and --control-file are required\n");
      *exit_code = 2;
      return;
    }
    *exit_code = RunGateway(*flags);
  });
}

}  // namespace deepinfer::cli
