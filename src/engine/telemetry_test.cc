// Batch telemetry (engine/telemetry.h): the records an engine writes for its steps and its
// requests' lifecycles, the run-id rule, and dropping instead of waiting.

#include "engine/telemetry.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;

const std::string kModelDir = std::string(DI_SOURCE_DIR) + "/../shared/models/stories260K";

fs::path FreshDir() {
  fs::path dir = fs::temp_directory_path() /
                 ("di-telemetry-" + std::to_string(::getpid()) + "-" +
                  std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  fs::create_directories(dir);
  return dir;
}

std::vector<nlohmann::json> ReadLines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(TelemetryTest, EngineWritesStepsAndEveryRequestsLifecycle) {
  auto m = model::LoadModel(kModelDir + "/stories260K.bin", kModelDir + "/tok512.bin");
  if (!m.ok()) GTEST_SKIP() << "stories260K not found at " << kModelDir;
  const fs::path dir = FreshDir();
  EngineOptions o;
  o.num_threads = 2;
  o.prefill_budget = 9;  // several steps per prompt
  o.telemetry = {dir.string(), "run1"};
  {
    auto engine = Engine::Create(**m, o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 3; ++i) {
      GenerateRequest r;
      r.prompt = {1, 20 + i, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120};
      r.max_tokens = 5;
      r.ignore_eos = true;
      r.request_id = "req-" + std::to_string(i);
      streams.push_back(*(*engine)->Submit(r));
    }
    for (auto& s : streams) {
      StreamUpdate u;
      while (!(s->Wait(u, std::chrono::milliseconds(100)) && u.finish != FinishReason::kNone)) {
      }
    }
    // A second engine with the same run id and rank is refused: the file exists.
    auto again = Engine::Create(**m, o);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(ErrorCodeOf(again.status()), "bad_telemetry");
    EXPECT_NE(again.status().message().find("run1"), std::string::npos);
  }
  const auto lines = ReadLines(dir / "run1.rank0.jsonl");
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.front()["type"], "start");
  EXPECT_EQ(lines.back()["type"], "end");
  EXPECT_EQ(lines.back()["dropped"], 0);
  std::map<std::string, std::vector<std::string>> events;
  int steps = 0, prefill_tokens = 0, decoded = 0;
  double last_start = 0;
  for (const auto& l : lines) {
    if (l["type"] == "request") events[l["id"].get<std::string>()].push_back(l["event"]);
    if (l["type"] == "step") {
      ++steps;
      EXPECT_EQ(l["step"].get<int>(), steps);
      EXPECT_GE(l["start_unix"].get<double>(), last_start);
      last_start = l["start_unix"].get<double>();
      EXPECT_GT(l["duration_ms"].get<double>(), 0.0);
      prefill_tokens += l["prefill_tokens"].get<int>();
      decoded += l["decode_seqs"].get<int>();
    }
  }
  EXPECT_EQ(lines.back()["steps"], steps);
  // The warm-up step is not a request's step and is not recorded.
  EXPECT_EQ(prefill_tokens, 3 * 12);
  EXPECT_EQ(decoded, 3 * 4);  // the first token comes from the prefill's last chunk
  ASSERT_EQ(events.size(), 3u);
  for (const auto& [id, e] : events) {
    EXPECT_EQ(e, (std::vector<std::string>{"arrived", "queued", "first_scheduled", "first_token",
                                           "finished"}))
        << id;
  }
  fs::remove_all(dir);
}

TEST(TelemetryTest, AFullQueueDropsAndCountsRecordsInsteadOfWaiting) {
  const fs::path dir = FreshDir();
  {
    auto t = Telemetry::Open({dir.string(), "small"}, 3, /*capacity=*/4);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < 1000; ++i) {
      StepRecord r;
      r.step = i + 1;
      (*t)->Step(r);
    }
  }
  const auto lines = ReadLines(dir / "small.rank3.jsonl");
  const auto& end = lines.back();
  EXPECT_EQ(end["type"], "end");
  EXPECT_EQ(end["steps"], 1000);
  EXPECT_GT(end["dropped"].get<int>(), 0);
  // start + written steps + end; the written ones plus the dropped ones are all of them.
  EXPECT_EQ(static_cast<int>(lines.size()) - 2 + end["dropped"].get<int>(), 1000);
  EXPECT_EQ(end["records"].get<int>() + end["dropped"].get<int>(), 1000);
  fs::remove_all(dir);
}

TEST(TelemetryTest, ConfigComesFromTheEnvironmentAndIsChecked) {
  ::unsetenv("DEEPINFER_BATCH_TELEMETRY_DIR");
  ::unsetenv("DEEPINFER_BATCH_TELEMETRY_RUN_ID");
  auto off = TelemetryConfigFromEnv();
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->enabled());
  ::setenv("DEEPINFER_BATCH_TELEMETRY_DIR", "/nonexistent/telemetry", 1);
  ::setenv("DEEPINFER_BATCH_TELEMETRY_RUN_ID", "r", 1);
  auto missing = TelemetryConfigFromEnv();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(ErrorCodeOf(missing.status()), "bad_telemetry");
  const fs::path dir = FreshDir();
  ::setenv("DEEPINFER_BATCH_TELEMETRY_DIR", dir.c_str(), 1);
  for (const char* bad : {"", "../x", "a/b", "has space"}) {
    ::setenv("DEEPINFER_BATCH_TELEMETRY_RUN_ID", bad, 1);
    EXPECT_FALSE(TelemetryConfigFromEnv().ok()) << bad;
  }
  ::setenv("DEEPINFER_BATCH_TELEMETRY_RUN_ID", "run-2026.12.03_a", 1);
  auto ok = TelemetryConfigFromEnv();
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(TelemetryPath(*ok, 2), dir.string() + "/run-2026.12.03_a.rank2.jsonl");
  ::unsetenv("DEEPINFER_BATCH_TELEMETRY_DIR");
  ::unsetenv("DEEPINFER_BATCH_TELEMETRY_RUN_ID");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::engine
