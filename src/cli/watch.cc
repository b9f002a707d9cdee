// `deepinfer watch`, `deepinfer watch stop`, `deepinfer watch resume`: flag parsing and signal
// handling; the supervisor lives in tools/watch.h.

#include "tools/watch.h"

#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

int Fail(const absl::Status& status) { return ReportFailure("watch", status); }

volatile bool g_stop = false;
void OnSignal(int) { g_stop = true; }

struct WatchFlags {
  std::string instance;
  tools::WatchOptions options;
  bool once = false;
  bool json = false;
  std::string clock_file;
  double stop_wait_s = 60;
};

std::unique_ptr<tools::WatchClock> MakeClock(const WatchFlags& f) {
  return f.clock_file.empty() ? tools::RealWatchClock() : tools::FileWatchClock(f.clock_file);
}

int RunWatch(const WatchFlags& f) {
  auto watcher = tools::Watcher::Create(f.instance, f.options, MakeClock(f));
  if (!watcher.ok()) return Fail(watcher.status());
  if (f.once) {
    auto sample = (*watcher)->SampleOnce();
    if (!sample.ok()) return Fail(sample.status());
    std::string out =
        f.json ? tools::WatchSampleJson(*sample) : tools::WatchSampleLine(*sample) + "\n";
    std::fputs(out.c_str(), stdout);
    return sample->state == "running" || sample->state == "restarted" ? 0 : 1;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  absl::Status status = (*watcher)->Run(&g_stop, /*print=*/true);
  if (!status.ok()) return Fail(status);
  return 0;
}

int RunStop(const WatchFlags& f) {
  auto clock = MakeClock(f);
  auto result = tools::WatchStop(f.instance, f.options.state_path, f.stop_wait_s, *clock);
  if (!result.ok()) return Fail(result.status());
  std::printf("%s\n", result->c_str());
  return 0;
}

int RunResume(const WatchFlags& f) {
  auto result = tools::WatchResume(f.instance, f.options.state_path);
  if (!result.ok()) return Fail(result.status());
  std::printf("%s\n", result->c_str());
  return 0;
}

void AddBindingFlags(CLI::App* cmd, WatchFlags* f, bool required) {
  CLI::Option* instance = cmd->add_option(
      "--instance", f->instance, "the binding written by `deepinfer render --instance-file`");
  if (required) instance->required();
  cmd->add_option("--state", f->options.state_path, "state file (default: <instance>.watch.json)");
  cmd->add_option("--clock-file", f->clock_file,
                  "tests only: read the time (Unix seconds) from this file");
}

}  // namespace

void RegisterWatch(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<WatchFlags>();
  auto stop_flags = std::make_shared<WatchFlags>();
  auto resume_flags = std::make_shared<WatchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "watch",
      "Idle recovery for one exact instance: restart it only after a crash, when no operator "
      "stopped it, and after --idle-hours of continuous device idleness.");
  cmd->require_subcommand(0, 1);
  AddBindingFlags(cmd, flags.get(), /*required=*/false);
  cmd->add_option("--idle-hours", flags->options.idle_hours,
                  "continuous idle time before a restart")
      ->check(CLI::Range(0.0, 1.0e6))
      ->capture_default_str();
  cmd->add_option("--interval-s", flags->options.interval_s, "mean seconds between samples")
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  cmd->add_option("--jitter", flags->options.jitter, "relative variation of the interval")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  cmd->add_option("--idle-probe", flags->options.idle_probe,
                  "shell command: exit 0 idle, 1 busy, else unknown (default: the launch "
                  "script's probe-idle)");
  cmd->add_option("--notify", flags->options.notify,
                  "shell command run on each state change (env DEEPINFER_WATCH_EVENT, "
                  "DEEPINFER_WATCH_MESSAGE, DEEPINFER_WATCH_INSTANCE)");
  cmd->add_option("--probe-timeout-s", flags->options.probe_timeout_s,
                  "limit for the idle probe and the notify hook")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_flag("--once", flags->once,
                "take one sample and exit (0 running or restarted, 1 otherwise)");
  cmd->add_flag("--json", flags->json, "with --once: print the sample as JSON");

  CLI::App* stop = cmd->add_subcommand(
      "stop", "Record an operator's stop (never restarted), then SIGTERM the instance.");
  AddBindingFlags(stop, stop_flags.get(), /*required=*/true);
  stop->add_option("--wait-s", stop_flags->stop_wait_s, "how long to wait for the exit")
      ->capture_default_str();
  stop->callback([stop_flags, exit_code] { *exit_code = RunStop(*stop_flags); });

  CLI::App* resume = cmd->add_subcommand(
      "resume", "Remove the stop record so that crash recovery is armed again.");
  AddBindingFlags(resume, resume_flags.get(), /*required=*/true);
  resume->callback([resume_flags, exit_code] { *exit_code = RunResume(*resume_flags); });

  // The parent's --instance is required only when no subcommand runs.
  cmd->callback([stop, resume, flags, exit_code] {
    if (stop->parsed() || resume->parsed()) return;
    if (flags->instance.empty()) {
      std::fprintf(stderr, "deepinfer watch: bad_flags: --instance is required\n");
      *exit_code = 2;
      return;
    }
    *exit_code = RunWatch(*flags);
  });
}

}  // namespace deepinfer::cli
