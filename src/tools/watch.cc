#include "tools/watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "http/client.h"
#include "http/url.h"
#include "tools/verify_model.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/log.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

using util::Json;

constexpr char kInstanceFormat[] = "deepinfer-instance/1";
constexpr char kStateFormat[] = "deepinfer-watch-state/1";

class RealClock final : public WatchClock {
 public:
  double Now() override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  void SleepUntil(double t, const volatile bool* stop) override {
    while (!*stop) {
      double left = t - Now();
      if (left <= 0) return;
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 0.2)));
    }
  }
};

class FileClock final : public WatchClock {
 public:
  explicit FileClock(std::string path) : path_(std::move(path)) {}
  double Now() override {
    auto text = util::ReadFile(path_);
    if (text.ok()) {
      char* end = nullptr;
      double t = std::strtod(text->c_str(), &end);
      if (end != text->c_str() && std::isfinite(t)) last_ = t;
    }
    return last_;
  }
  void SleepUntil(double t, const volatile bool* stop) override {
    while (!*stop && Now() < t) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

 private:
  std::string path_;
  double last_ = 0;
};

// argv of a live process, or empty when it is gone or unreadable.
std::vector<std::string> ProcessArgv(pid_t pid) {
  auto text = util::ReadFile(fmt::format("/proc/{}/cmdline", pid));
  std::vector<std::string> argv;
  if (!text.ok()) return argv;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\0', start);
    if (end == std::string::npos) end = text->size();
    argv.push_back(text->substr(start, end - start));
    start = end + 1;
  }
  return argv;
}

std::vector<pid_t> ProcessesNamed(const std::string& argv0) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
    std::vector<std::string> argv = ProcessArgv(pid);
    if (!argv.empty() && argv[0] == argv0) pids.push_back(pid);
  }
  return pids;
}

// "key=value" lines.
std::map<std::string, std::string> ParseKeyValues(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    start = end + 1;
  }
  return out;
}

// What the launch script recorded about the last exit.
struct LastExit {
  bool present = false;
  int status = 0;
  std::string signal;
  double time = 0;
  bool crashed = false;
};

LastExit ReadLastExit(const std::string& artifacts) {
  LastExit e;
  auto text = util::ReadFile(artifacts + "/last-exit");
  if (!text.ok()) return e;
  auto kv = ParseKeyValues(*text);
  if (!kv.count("status") || !kv.count("time")) return e;
  e.present = true;
  e.status = std::atoi(kv["status"].c_str());
  e.signal = kv["signal"];
  e.time = std::atof(kv["time"].c_str());
  // Re-derived here rather than trusting "reason": an exit is a crash unless it is clean or a
  // stop signal an operator sends.
  static const char* kStops[] = {"TERM", "INT", "HUP", "KILL", "QUIT"};
  bool stop_signal = std::any_of(std::begin(kStops), std::end(kStops),
                                 [&](const char* s) { return e.signal == s; });
  e.crashed = !(e.status == 0 || stop_signal);
  return e;
}

// Runs `command` with /bin/sh, extra environment variables set, stdout and stderr to `log_fd`
// (or /dev/null). Returns the exit status, or -1 when it could not run, was killed or timed out.
int RunShell(const std::string& command,
             const std::vector<std::pair<std::string, std::string>>& env, double timeout_s,
             std::string* output) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return -1;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return -1;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  ::fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  int status = 0;
  bool exited = false;
  char buf[4096];
  while (true) {
    ssize_t n;
    while ((n = ::read(pipefd[0], buf, sizeof(buf))) > 0) {
      if (output != nullptr && output->size() < 65536) output->append(buf, static_cast<size_t>(n));
    }
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      exited = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof(buf))) > 0) {
    if (output != nullptr && output->size() < 65536) output->append(buf, static_cast<size_t>(n));
  }
  ::close(pipefd[0]);
  if (!exited || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// Starts `bash script start` in its own session, detached from the watcher (double fork: the
// launch script is reparented to init and outlives the watcher).
absl::Status SpawnDetached(const std::string& script, const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid < 0)
    return InternalError(util::codes::kIoError, fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setsid();
    pid_t grandchild = ::fork();
    if (grandchild != 0) ::_exit(grandchild < 0 ? 1 : 0);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0640);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execl("/bin/bash", "bash", script.c_str(), "start", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return InternalError(util::codes::kIoError, "could not start the launch script");
  }
  return absl::OkStatus();
}

std::string FormatHours(double seconds) { return fmt::format("{:.2f} h", seconds / 3600.0); }

std::string TimeText(double t) { return util::UtcTimestamp(t); }

// The pid of the running instance, or 0.
pid_t RunningPid(const WatchInstance& instance) {
  const std::string process_name = "deepinfer-serve@" + instance.name;
  auto pid_text = util::ReadFile(instance.artifacts + "/serve.pid");
  if (pid_text.ok()) {
    pid_t pid = static_cast<pid_t>(std::atol(pid_text->c_str()));
    if (pid > 0) {
      std::vector<std::string> argv = ProcessArgv(pid);
      // Right after a start, serve.pid names the launch script's subshell for the moment
      // before it execs the server under the instance's name.
      for (int i = 0; i < 20 && !argv.empty() && argv[0] != process_name &&
                      (argv[0] == "bash" || argv[0] == "/bin/bash" || argv[0] == "/usr/bin/bash");
           ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        argv = ProcessArgv(pid);
      }
      if (!argv.empty()) {
        if (argv[0] == process_name) return pid;
        // The docker launcher's pid is the docker client running the named container.
        bool docker =
            argv[0] == "docker" ||
            (argv[0].size() > 7 && argv[0].compare(argv[0].size() - 7, 7, "/docker") == 0);
        if (docker && std::find(argv.begin(), argv.end(), instance.name) != argv.end()) {
          return pid;
        }
      }
    }
  }
  std::vector<pid_t> named = ProcessesNamed(process_name);
  return named.empty() ? 0 : named.front();
}

}  // namespace

std::unique_ptr<WatchClock> RealWatchClock() { return std::make_unique<RealClock>(); }
std::unique_ptr<WatchClock> FileWatchClock(const std::string& path) {
  return std::make_unique<FileClock>(path);
}

std::string DefaultWatchStatePath(const std::string& instance_path) {
  return instance_path + ".watch.json";
}

absl::StatusOr<WatchInstance> ParseWatchInstance(std::string_view text) {
  auto bad = [](const std::string& why) {
    return InvalidArgumentError(util::codes::kBadInstance, why);
  };
  auto json = util::ParseJson(text);
  if (!json.ok() || !json->is_object()) return bad("the instance file is not a JSON object");
  util::Json& j = *json;
  if (j["format"] != kInstanceFormat) {
    return bad(fmt::format("format: must be \"{}\"", kInstanceFormat));
  }
  WatchInstance w;
  for (auto [key, out] :
       {std::pair{"name", &w.name}, std::pair{"script", &w.script},
        std::pair{"script_sha256", &w.script_sha256}, std::pair{"binary", &w.binary},
        std::pair{"binary_sha256", &w.binary_sha256}, std::pair{"artifacts", &w.artifacts},
        std::pair{"launcher", &w.launcher}}) {
    if (!j[key].is_string() || j[key].get<std::string>().empty()) {
      return bad(fmt::format("{}: must be a non-empty string", key));
    }
    *out = j[key].get<std::string>();
  }
  if (!j["port"].is_number_integer() || j["port"].get<int64_t>() < 1 ||
      j["port"].get<int64_t>() > 65535) {
    return bad("port: must be between 1 and 65535");
  }
  w.port = static_cast<int32_t>(j["port"].get<int64_t>());
  if (w.script[0] != '/' || w.artifacts[0] != '/' || w.binary[0] != '/') {
    return bad("script, binary and artifacts must be absolute paths");
  }
  return w;
}

struct Watcher::Impl {
  WatchInstance instance;
  WatchOptions options;
  std::unique_ptr<WatchClock> clock;
  int lock_fd = -1;
  std::mt19937_64 rng{std::random_device{}()};

  // Persistent state.
  double last_sample = 0;
  std::optional<double> idle_since;
  std::optional<double> last_restart;
  std::optional<double> restarted_after_exit;  // the last-exit time a restart answered
  int64_t restarts = 0;
  std::string notified_key;
  std::string state;

  std::string StopPath() const { return options.state_path + ".stop"; }

  void LoadState() {
    auto text = util::ReadFile(options.state_path);
    if (!text.ok()) return;
    auto json = util::ParseJson(*text);
    if (!json.ok() || !json->is_object()) return;
    util::Json& j = *json;
    // A state written for another binding (a re-rendered script) starts over.
    if (j["format"] != kStateFormat || j["instance"] != instance.name ||
        j["script_sha256"] != instance.script_sha256 || j["port"] != instance.port) {
      return;
    }
    if (j["last_sample"].is_number()) last_sample = j["last_sample"].get<double>();
    if (j["idle_since"].is_number()) idle_since = j["idle_since"].get<double>();
    if (j["last_restart"].is_number()) last_restart = j["last_restart"].get<double>();
    if (j["restarted_after_exit"].is_number()) {
      restarted_after_exit = j["restarted_after_exit"].get<double>();
    }
    if (j["restarts"].is_number_integer()) restarts = j["restarts"].get<int64_t>();
    if (j["notified_key"].is_string()) notified_key = j["notified_key"].get<std::string>();
    if (j["state"].is_string()) state = j["state"].get<std::string>();
  }

  absl::Status SaveState(const WatchSample& sample) {
    util::Json j = util::Json::object();
    j["format"] = kStateFormat;
    j["instance"] = instance.name;
    j["script_sha256"] = instance.script_sha256;
    j["binary_sha256"] = instance.binary_sha256;
    j["port"] = instance.port;
    j["last_sample"] = last_sample;
    j["idle_since"] = idle_since ? util::Json(*idle_since) : util::Json(nullptr);
    j["last_restart"] = last_restart ? util::Json(*last_restart) : util::Json(nullptr);
    j["restarted_after_exit"] =
        restarted_after_exit ? util::Json(*restarted_after_exit) : util::Json(nullptr);
    j["restarts"] = restarts;
    j["notified_key"] = notified_key;
    j["state"] = sample.state;
    j["message"] = sample.message;
    return util::WriteFileAtomically(options.state_path, util::DumpJson(j) + "\n");
  }

  // Runs the notification hook unless `key` was the last one sent. Returns whether it was sent.
  bool Notify(const std::string& key, const std::string& event, const std::string& message) {
    if (key == notified_key) return false;
    if (!options.notify.empty()) {
      std::string output;
      int rc = RunShell(options.notify,
                        {{"DEEPINFER_WATCH_EVENT", event},
                         {"DEEPINFER_WATCH_MESSAGE", message},
                         {"DEEPINFER_WATCH_INSTANCE", instance.name}},
                        options.probe_timeout_s, &output);
      if (rc != 0) {
        // Not marked as sent: the next sample tries again.
        std::fprintf(stderr, "deepinfer watch: notify hook failed (status %d): %s\n", rc,
                     output.substr(0, 200).c_str());
        return false;
      }
    }
    notified_key = key;
    return true;
  }

  // 0 idle, 1 busy, -1 unknown.
  int ProbeIdle(std::string* detail) {
    std::string command =
        options.idle_probe.empty()
            ? "exec /bin/bash " + ShellQuoteForWatch(instance.script) + " probe-idle"
            : options.idle_probe;
    std::string output;
    int rc = RunShell(command, {}, options.probe_timeout_s, &output);
    while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
    size_t last_line = output.find_last_of('\n');
    *detail = last_line == std::string::npos ? output : output.substr(last_line + 1);
    if (rc == 0) return 0;
    if (rc == 1) return 1;
    return -1;
  }

  static std::string ShellQuoteForWatch(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  }

  absl::StatusOr<WatchSample> Sample() {
    WatchSample sample;
    const double now = clock->Now();
    sample.time = now;
    // Continuity: a gap longer than a few intervals (the watcher was down) proves nothing about
    // the time in between.
    const double max_gap = 2.5 * options.interval_s * (1 + options.jitter);
    if (last_sample > 0 && now - last_sample > max_gap) idle_since.reset();
    last_sample = now;

    std::string key;
    std::string event;
    auto decide = [&](const std::string& state_name, const std::string& k, std::string message) {
      sample.state = state_name;
      sample.message = std::move(message);
      key = k;
      event = state_name;
    };

    // 1. The instance.
    pid_t pid = RunningPid(instance);
    auto script_sha = Sha256File(instance.script);
    const bool stop_record = util::ReadFile(StopPath()).ok();
    if (pid > 0) {
      idle_since.reset();  // our own instance occupies the devices
      http::ClientRequest health;
      health.target = "/health";
      http::FetchOptions within;
      within.idle_timeout_ms = 0;
      within.total_timeout_ms = 10000;
      auto r = http::Fetch(http::Url("127.0.0.1", instance.port), health, within);
      bool healthy = r.ok() && r->status == 200;
      std::string disarmed =
          stop_record ? " (recovery disarmed by watch stop; run watch resume)" : "";
      if (healthy) {
        decide("running", "running", fmt::format("running (pid {}), /health ok{}", pid, disarmed));
      } else {
        decide("unhealthy", "unhealthy",
               fmt::format(
                   "running (pid {}) but /health fails: {}{}", pid,
                   r.ok() ? fmt::format("HTTP {}", r->status) : std::string(r.status().message()),
                   disarmed));
      }
    } else if (stop_record) {
      idle_since.reset();
      decide("stopped_by_operator", "stopped_by_operator",
             "stopped on purpose with deepinfer watch stop; not restarting");
    } else if (!script_sha.ok() || *script_sha != instance.script_sha256) {
      idle_since.reset();
      decide("binding_changed", "binding_changed:script",
             script_sha.ok()
                 ? fmt::format("the launch script's sha256 is {}, bound to {}; not restarting",
                               *script_sha, instance.script_sha256)
                 : fmt::format("the launch script cannot be hashed ({}); not restarting",
                               std::string(script_sha.status().message())));
    } else {
      LastExit last = ReadLastExit(instance.artifacts);
      // The exit a restart answered is still the latest: that restart never came up (its
      // preflight refused, or it died before recording anything).
      const bool stale = last.present && restarted_after_exit && last.time <= *restarted_after_exit;
      if (!last.present) {
        idle_since.reset();
        decide("stopped_unknown", "stopped_unknown",
               "not running and no exit was recorded; not restarting an unknown stop");
      } else if (!last.crashed && !stale) {
        idle_since.reset();
        decide(
            "stopped", "stopped",
            fmt::format("stopped by an operator (status {}{}) at {}; not restarting", last.status,
                        last.signal.empty() ? "" : ", SIG" + last.signal, TimeText(last.time)));
      } else {
        // 2. The device-idle probe, only now, one sample after the other.
        std::string probe_detail;
        int idle = ProbeIdle(&probe_detail);
        sample.idle = idle == 0;
        if (idle == 0) {
          if (!idle_since) idle_since = now;
        } else {
          idle_since.reset();
        }
        const double idle_for = idle_since ? now - *idle_since : 0;
        const double needed = options.idle_hours * 3600.0;
        std::string what = stale ? "the last restart did not come up"
                                 : fmt::format("crashed (status {}{}) at {}", last.status,
                                               last.signal.empty() ? "" : ", SIG" + last.signal,
                                               TimeText(last.time));
        if (idle < 0) {
          decide(
              "probe_failed", "probe_failed",
              fmt::format("{}; the idle probe gave no answer ({}); waiting", what, probe_detail));
        } else if (idle_since && idle_for >= needed) {
          auto binary_sha = Sha256File(instance.binary);
          if (!binary_sha.ok() || *binary_sha != instance.binary_sha256) {
            decide("binding_changed", "binding_changed:binary",
                   fmt::format("{}; the binary no longer hashes to {}; not restarting", what,
                               instance.binary_sha256));
          } else {
            absl::Status spawned =
                SpawnDetached(instance.script, instance.artifacts + "/launch.log");
            if (!spawned.ok()) return spawned;
            ++restarts;
            last_restart = now;
            restarted_after_exit = last.time;
            idle_since.reset();
            sample.restarted = true;
            decide("restarted", fmt::format("restarted:{}", restarts),
                   fmt::format("{}; idle for {}: restarted (restart {})", what,
                               FormatHours(idle_for), restarts));
          }
        } else {
          decide(stale ? "restart_failed" : "crashed_waiting",
                 stale ? "restart_failed" : "crashed_waiting",
                 fmt::format("{}; {}: restart after {} of continuous idle ({} so far)", what,
                             idle == 0 ? "machine idle" : "machine busy (" + probe_detail + ")",
                             FormatHours(needed), FormatHours(idle_for)));
        }
      }
    }
    sample.idle_since = idle_since;
    // The first sample of a healthy instance is not news.
    if (!(state.empty() && key == "running")) {
      sample.notified = Notify(key, event, fmt::format("{}: {}", instance.name, sample.message));
    } else {
      notified_key = key;
    }
    state = sample.state;
    DI_RETURN_IF_ERROR(SaveState(sample));
    return sample;
  }
};

Watcher::Watcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Watcher::~Watcher() {
  if (impl_ && impl_->lock_fd >= 0) ::close(impl_->lock_fd);
}

absl::StatusOr<std::unique_ptr<Watcher>> Watcher::Create(const std::string& instance_path,
                                                         const WatchOptions& options,
                                                         std::unique_ptr<WatchClock> clock) {
  auto impl = std::make_unique<Impl>();
  DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(instance_path));
  DI_ASSIGN_OR_RETURN(impl->instance, ParseWatchInstance(text));
  impl->options = options;
  if (impl->options.state_path.empty()) {
    impl->options.state_path = DefaultWatchStatePath(instance_path);
  }
  if (!(impl->options.interval_s > 0) || !(impl->options.idle_hours >= 0) ||
      !(impl->options.jitter >= 0 && impl->options.jitter < 1)) {
    return InvalidArgumentError(util::codes::kBadFlags,
                                "need interval > 0, idle hours >= 0 and 0 <= jitter < 1");
  }
  impl->clock = std::move(clock);
  std::string lock_path = impl->options.state_path + ".lock";
  impl->lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (impl->lock_fd < 0) {
    return InternalError(util::codes::kIoError,
                         fmt::format("{}: {}", lock_path, std::strerror(errno)));
  }
  if (::flock(impl->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(impl->lock_fd);
    return MakeError(absl::StatusCode::kFailedPrecondition, util::codes::kWatchLocked,
                     fmt::format("another deepinfer watch holds {}", lock_path));
  }
  impl->LoadState();
  return std::unique_ptr<Watcher>(new Watcher(std::move(impl)));
}

absl::StatusOr<WatchSample> Watcher::SampleOnce() { return impl_->Sample(); }

absl::Status Watcher::Run(const volatile bool* stop, bool print) {
  std::uniform_real_distribution<double> jitter(-impl_->options.jitter, impl_->options.jitter);
  while (!*stop) {
    DI_ASSIGN_OR_RETURN(WatchSample sample, impl_->Sample());
    if (print) {
      std::fprintf(stdout, "%s\n", WatchSampleLine(sample).c_str());
      std::fflush(stdout);
    }
    double wait = impl_->options.interval_s * (1 + jitter(impl_->rng));
    impl_->clock->SleepUntil(sample.time + wait, stop);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> WatchStop(const std::string& instance_path,
                                      const std::string& state_path, double wait_s,
                                      WatchClock& clock) {
  DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(instance_path));
  DI_ASSIGN_OR_RETURN(WatchInstance instance, ParseWatchInstance(text));
  std::string path = state_path.empty() ? DefaultWatchStatePath(instance_path) : state_path;
  util::Json record = util::Json{{"stopped_at", clock.Now()}, {"instance", instance.name}};
  DI_RETURN_IF_ERROR(util::WriteFileAtomically(path + ".stop", util::DumpJson(record) + "\n"));
  pid_t pid = RunningPid(instance);
  if (pid == 0)
    return fmt::format("{}: stop recorded; the instance was not running", instance.name);
  if (::kill(pid, SIGTERM) != 0) {
    return InternalError(util::codes::kIoError,
                         fmt::format("kill {}: {}", pid, std::strerror(errno)));
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (::kill(pid, 0) != 0 || ProcessArgv(pid).empty()) {
      return fmt::format("{}: stop recorded; sent SIGTERM to pid {}, it exited", instance.name,
                         pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return MakeError(absl::StatusCode::kDeadlineExceeded, util::codes::kStillRunning,
                   fmt::format("{}: stop recorded; pid {} still runs {} s after SIGTERM",
                               instance.name, pid, wait_s));
}

absl::StatusOr<std::string> WatchResume(const std::string& instance_path,
                                        const std::string& state_path) {
  DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(instance_path));
  DI_ASSIGN_OR_RETURN(WatchInstance instance, ParseWatchInstance(text));
  std::string path =
      (state_path.empty() ? DefaultWatchStatePath(instance_path) : state_path) + ".stop";
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return fmt::format("{}: no stop was recorded", instance.name);
    return InternalError(util::codes::kIoError, fmt::format("{}: {}", path, std::strerror(errno)));
  }
  return fmt::format("{}: stop record removed; crash recovery is armed again", instance.name);
}

std::string WatchSampleLine(const WatchSample& s) {
  return fmt::format("{} {:<20} {}{}", TimeText(s.time), s.state, s.message,
                     s.notified ? " [notified]" : "");
}

std::string WatchSampleJson(const WatchSample& s) {
  util::Json j =
      util::Json{{"time", s.time},
                 {"state", s.state},
                 {"message", s.message},
                 {"idle", s.idle},
                 {"idle_since", s.idle_since ? util::Json(*s.idle_since) : util::Json(nullptr)},
                 {"restarted", s.restarted},
                 {"notified", s.notified}};
  return util::DumpJson(j) + "\n";
}

}  // namespace deepinfer::tools
