#include "tools/watch.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "tools/verify_model.h"
#include "util/mapped_file.h"

namespace deepinfer::tools {
namespace {

namespace fs = std::filesystem;

constexpr double kHour = 3600;

// A launch script with the rendered script's contract (process name, serve.pid, last-exit),
// running `sleep` instead of a server, so that the tests drive real processes.
const char kFakeScript[] = R"SH(#!/bin/bash
set -u
ART="$(dirname "$0")/artifacts"
case "${1:-start}" in
  probe-idle) test ! -e "$ART/../busy" ;;
  start)
    (exec -a "deepinfer-serve@$(cat "$ART/../name")" sleep 300) &
    child=$!
    echo "$child" >"$ART/serve.pid"
    trap 'kill -TERM "$child"' TERM
    status=0
    wait "$child" || status=$?
    sig=""
    if ((status > 128)); then sig=$(kill -l $((status - 128))); fi
    rm -f "$ART/serve.pid"
    printf 'status=%s\nsignal=%s\ntime=%s\n' "$status" "$sig" "$(date +%s)" >"$ART/last-exit.tmp"
    mv "$ART/last-exit.tmp" "$ART/last-exit"
    ;;
esac
)SH";

class WatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/watch_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    name_ = "wt" + std::to_string(::getpid()) + "-" + fs::path(dir_).filename().string().substr(11);
    fs::create_directories(dir_ + "/artifacts");
    Write("name", name_);
    Write("run.sh", kFakeScript);
    Write("deepinfer", "binary bytes");
    SetTime(1.0e9);
    WriteInstance();
    options_.idle_hours = 2;
    options_.interval_s = 900;
    options_.jitter = 0;
    options_.notify = "echo \"$DEEPINFER_WATCH_EVENT\" >>" + dir_ + "/notes";
  }

  void TearDown() override {
    watcher_.reset();
    KillInstance(SIGKILL);
    // The launch script removes serve.pid and writes last-exit after its server dies: let it
    // finish before the folder goes (removing both at once threw "No such file or directory").
    WaitFor([&] { return !fs::exists(dir_ + "/artifacts/serve.pid"); });
    std::error_code ec;
    for (int i = 0; i < 3 && fs::remove_all(dir_, ec) == static_cast<std::uintmax_t>(-1); ++i) {
    }
  }

  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(dir_ + "/" + rel, std::ios::binary) << text;
  }

  void WriteInstance() {
    std::ostringstream j;
    j << "{\"format\":\"deepinfer-instance/1\",\"name\":\"" << name_ << "\",\"script\":\"" << dir_
      << "/run.sh\",\"script_sha256\":\"" << *Sha256File(dir_ + "/run.sh") << "\",\"binary\":\""
      << dir_ << "/deepinfer\",\"binary_sha256\":\"" << *Sha256File(dir_ + "/deepinfer")
      << "\",\"port\":1,\"artifacts\":\"" << dir_ << "/artifacts\",\"launcher\":\"plain\"}";
    Write("instance.json", j.str());
  }

  void SetTime(double t) {
    now_ = t;
    Write("clock", std::to_string(t));
  }
  void Advance(double seconds) { SetTime(now_ + seconds); }

  void RecordExit(int status, const std::string& signal) {
    Write("artifacts/last-exit", "status=" + std::to_string(status) + "\nsignal=" + signal +
                                     "\ntime=" + std::to_string(std::time(nullptr)) + "\n");
  }

  WatchSample Sample() {
    if (!watcher_) {
      auto w = Watcher::Create(dir_ + "/instance.json", options_, FileWatchClock(dir_ + "/clock"));
      EXPECT_TRUE(w.ok()) << w.status();
      watcher_ = std::move(*w);
    }
    auto s = watcher_->SampleOnce();
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }

  // The instance's pid while it runs, else 0. A server that has exited (or is exiting: its
  // memory, argv included, goes before it becomes a zombie) may still have a pid that kill(pid,
  // 0) accepts until the launch script reaps it and removes serve.pid; it counts as exited once
  // its argv is gone, the rule WatchStop itself applies.
  pid_t InstancePid() {
    auto text = util::ReadFile(dir_ + "/artifacts/serve.pid");
    if (!text.ok()) return 0;
    pid_t pid = std::atoi(text->c_str());
    if (pid <= 0 || ::kill(pid, 0) != 0) return 0;
    auto argv = util::ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    return argv.ok() && !argv->empty() ? pid : 0;
  }

  bool InstanceRunsUnderItsName() {
    pid_t pid = InstancePid();
    if (pid == 0) return false;
    auto argv = util::ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    return argv.ok() && argv->rfind("deepinfer-serve@" + name_ + '\0', 0) == 0;
  }

  bool WaitFor(const std::function<bool()>& cond) {
    for (int i = 0; i < 250; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  void KillInstance(int sig) {
    pid_t pid = InstancePid();
    if (pid > 0) ::kill(pid, sig);
  }

  int Notes(const std::string& event) {
    auto text = util::ReadFile(dir_ + "/notes");
    if (!text.ok()) return 0;
    int n = 0;
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) n += line == event;
    return n;
  }

  std::string dir_;
  std::string name_;
  double now_ = 0;
  WatchOptions options_;
  std::unique_ptr<Watcher> watcher_;
};

TEST_F(WatchTest, CrashIsRestartedOnlyAfterContinuousIdleHours) {
  RecordExit(139, "SEGV");
  EXPECT_EQ(Sample().state, "crashed_waiting");
  for (int i = 0; i < 7; ++i) {  // 1h45 of idle samples
    Advance(900);
    WatchSample s = Sample();
    EXPECT_EQ(s.state, "crashed_waiting") << s.message;
    EXPECT_FALSE(s.restarted);
  }
  EXPECT_EQ(InstancePid(), 0);
  Advance(900);  // 2h
  WatchSample s = Sample();
  EXPECT_EQ(s.state, "restarted") << s.message;
  ASSERT_TRUE(WaitFor([&] { return InstancePid() > 0; })) << "the launch script did not start";
  Advance(900);
  // Port 1 has no /health: running but unhealthy, and never restarted twice.
  s = Sample();
  EXPECT_EQ(s.state, "unhealthy") << s.message;
  EXPECT_EQ(Notes("crashed_waiting"), 1);  // nine samples in that state, one notification
  EXPECT_EQ(Notes("restarted"), 1);
}

TEST_F(WatchTest, OneBusySampleStartsTheIdleClockOver) {
  RecordExit(134, "ABRT");
  Sample();
  for (int i = 0; i < 6; ++i) {  // 1h30 of idle samples
    Advance(900);
    Sample();
  }
  Write("busy", "");
  Advance(900);
  EXPECT_FALSE(Sample().idle);
  fs::remove(dir_ + "/busy");
  for (int i = 0; i < 8; ++i) {  // idle again from the first of these: 1h45
    Advance(900);
    EXPECT_EQ(Sample().state, "crashed_waiting");
  }
  Advance(900);
  EXPECT_EQ(Sample().state, "restarted");
  EXPECT_TRUE(WaitFor([&] { return InstancePid() > 0; }));
}

TEST_F(WatchTest, AGapBetweenSamplesProvesNoIdleness) {
  RecordExit(1, "");
  Sample();
  Advance(3 * kHour);  // the watcher was down: nothing is known about these hours
  EXPECT_EQ(Sample().state, "crashed_waiting");
  Advance(900);
  EXPECT_EQ(Sample().state, "crashed_waiting");
}

TEST_F(WatchTest, OperatorStopsAndKillsStayStopped) {
  for (auto [status, signal] : std::vector<std::pair<int, std::string>>{
           {0, ""}, {143, "TERM"}, {137, "KILL"}, {130, "INT"}}) {
    RecordExit(status, signal);
    for (int i = 0; i < 10; ++i) {
      Advance(900);
      WatchSample s = Sample();
      EXPECT_EQ(s.state, "stopped") << signal;
      EXPECT_FALSE(s.restarted);
    }
  }
  EXPECT_EQ(InstancePid(), 0);
}

TEST_F(WatchTest, NoExitRecordIsAnUnknownAndStaysStopped) {
  for (int i = 0; i < 10; ++i) {
    Advance(900);
    EXPECT_EQ(Sample().state, "stopped_unknown");
  }
  EXPECT_EQ(Notes("stopped_unknown"), 1);
}

TEST_F(WatchTest, WatchStopRecordsTheStopAndStopsTheInstance) {
  ASSERT_EQ(std::system(("setsid bash " + dir_ + "/run.sh start >/dev/null 2>&1 &").c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return InstanceRunsUnderItsName(); }));
  EXPECT_EQ(Sample().state, "unhealthy");
  auto clock = FileWatchClock(dir_ + "/clock");
  auto stopped = WatchStop(dir_ + "/instance.json", "", 10, *clock);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(InstancePid(), 0) << *stopped;
  // Even a crash record would not bring it back now.
  ASSERT_TRUE(WaitFor([&] { return util::ReadFile(dir_ + "/artifacts/last-exit").ok(); }));
  RecordExit(139, "SEGV");
  for (int i = 0; i < 12; ++i) {
    Advance(900);
    EXPECT_EQ(Sample().state, "stopped_by_operator");
  }
  ASSERT_TRUE(WatchResume(dir_ + "/instance.json", "").ok());
  Advance(900);
  EXPECT_EQ(Sample().state, "crashed_waiting");
}

TEST_F(WatchTest, AChangedScriptOrBinaryIsNeverStarted) {
  RecordExit(139, "SEGV");
  Write("run.sh", std::string(kFakeScript) + "# edited\n");
  for (int i = 0; i < 12; ++i) {
    Advance(900);
    EXPECT_EQ(Sample().state, "binding_changed");
  }
  EXPECT_EQ(Notes("binding_changed"), 1);
  Write("run.sh", kFakeScript);
  Write("deepinfer", "another binary");
  WatchSample s;
  for (int i = 0; i < 12; ++i) {
    Advance(900);
    s = Sample();
  }
  EXPECT_EQ(s.state, "binding_changed") << s.message;
  EXPECT_NE(s.message.find("binary"), std::string::npos);
  EXPECT_EQ(InstancePid(), 0);
}

TEST_F(WatchTest, StateSurvivesARestartOfTheWatcher) {
  RecordExit(139, "SEGV");
  for (int i = 0; i < 8; ++i) {
    Sample();
    watcher_.reset();  // as with --once: every sample is a fresh process
    Advance(900);
  }
  EXPECT_EQ(Sample().state, "restarted");
  EXPECT_TRUE(WaitFor([&] { return InstancePid() > 0; }));
  EXPECT_EQ(Notes("crashed_waiting"), 1);
}

TEST_F(WatchTest, TwoWatchersCannotDriveOneInstance) {
  Sample();
  auto second = Watcher::Create(dir_ + "/instance.json", options_, FileWatchClock(dir_ + "/clock"));
  EXPECT_FALSE(second.ok());
}

TEST_F(WatchTest, AnUnansweredIdleProbeIsNotIdle) {
  RecordExit(139, "SEGV");
  options_.idle_probe = "exit 7";
  for (int i = 0; i < 12; ++i) {
    Advance(900);
    WatchSample s = Sample();
    EXPECT_EQ(s.state, "probe_failed");
    EXPECT_FALSE(s.idle);
  }
}

}  // namespace
}  // namespace deepinfer::tools
