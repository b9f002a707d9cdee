#include "engine/telemetry.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/time/time.h"
#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

const char* EventName(const RequestRecord& r) {
  switch (r.event) {
    case RequestEvent::kArrived:
      return "arrived";
    case RequestEvent::kQueued:
      return "queued";
    case RequestEvent::kFirstScheduled:
      return "first_scheduled";
    case RequestEvent::kFirstToken:
      return "first_token";
    case RequestEvent::kFinished:
      return r.reason == FinishReason::kCancelled ? "cancelled" : "finished";
  }
  return "unknown";
}

const char* ReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "none";
}

bool PlainName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return s != "." && s != "..";
}

}  // namespace

absl::StatusOr<TelemetryConfig> TelemetryConfigFromEnv() {
  TelemetryConfig c;
  const char* dir = std::getenv("DEEPINFER_BATCH_TELEMETRY_DIR");
  if (dir == nullptr || *dir == '\0') return c;
  c.dir = dir;
  struct stat st;
  if (::stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgumentError(
        util::codes::kBadTelemetry,
        fmt::format("DEEPINFER_BATCH_TELEMETRY_DIR {} is not an existing folder (create it first)",
                    c.dir));
  }
  const char* run = std::getenv("DEEPINFER_BATCH_TELEMETRY_RUN_ID");
  c.run_id = run != nullptr ? run : "";
  if (!PlainName(c.run_id)) {
    return InvalidArgumentError(
        util::codes::kBadTelemetry,
        "DEEPINFER_BATCH_TELEMETRY_RUN_ID must be set with DEEPINFER_BATCH_TELEMETRY_DIR: a new "
        "name for each run, 1-128 characters of [A-Za-z0-9._-]");
  }
  return c;
}

std::string TelemetryPath(const TelemetryConfig& config, int32_t rank) {
  return fmt::format("{}/{}.rank{}.jsonl", config.dir, config.run_id, rank);
}

absl::StatusOr<std::unique_ptr<Telemetry>> Telemetry::Open(const TelemetryConfig& config,
                                                           int32_t rank, size_t capacity) {
  const std::string path = TelemetryPath(config, rank);
  // O_EXCL: a run id names one run; an existing file is never appended to or replaced.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) {
      return InvalidArgumentError(
          util::codes::kBadTelemetry,
          fmt::format("{} exists: DEEPINFER_BATCH_TELEMETRY_RUN_ID {} was used by an earlier "
                      "run; give each run a new id",
                      path, config.run_id));
    }
    return InvalidArgumentError(util::codes::kBadTelemetry,
                                fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  }
  std::FILE* file = ::fdopen(fd, "w");
  if (file == nullptr) {
    ::close(fd);
    return InvalidArgumentError(util::codes::kBadTelemetry, "cannot open " + path);
  }
  std::unique_ptr<Telemetry> t(new Telemetry(file, rank, capacity));
  std::fprintf(file,
               "{\"type\":\"start\",\"rank\":%d,\"run_id\":%s,\"unix\":%.6f,\"capacity\":%zu}\n",
               rank, util::DumpJson(util::Json(config.run_id)).c_str(),
               t->ToUnix(std::chrono::steady_clock::now()), capacity);
  std::fflush(file);
  return t;
}

Telemetry::Telemetry(std::FILE* file, int32_t rank, size_t capacity)
    : file_(file), rank_(rank), capacity_(capacity) {
  const double unix_now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const double steady_now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  unix_minus_steady_ = unix_now - steady_now;
  writer_ = std::thread([this] { WriterLoop(); });
}

Telemetry::~Telemetry() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.Signal();
  writer_.join();
  absl::MutexLock lock(&mu_);
  std::fprintf(file_, "{\"type\":\"end\",\"rank\":%d,\"steps\":%lld,\"records\":%lld,"
               "\"dropped\":%lld}\n",
               rank_, static_cast<long long>(steps_), static_cast<long long>(queued_),
               static_cast<long long>(dropped_));
  std::fclose(file_);
}

double Telemetry::ToUnix(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double>(t.time_since_epoch()).count() + unix_minus_steady_;
}

void Telemetry::Step(const StepRecord& record) { Push(record); }

void Telemetry::Request(RequestRecord record) { Push(std::move(record)); }

void Telemetry::Push(std::variant<StepRecord, RequestRecord> record) {
  absl::MutexLock lock(&mu_);
  if (std::holds_alternative<StepRecord>(record)) ++steps_;
  if (queue_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  ++queued_;
  queue_.push_back(std::move(record));
}

void Telemetry::WriterLoop() {
  std::deque<std::variant<StepRecord, RequestRecord>> batch;
  std::string out;
  while (true) {
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      // Wakes a few times a second: the engine thread never signals (that would cost it a
      // futex call per record).
      if (queue_.empty() && !stop_) cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
      batch.swap(queue_);
      stop = stop_;
    }
    out.clear();
    for (const auto& rec : batch) {
      if (const auto* s = std::get_if<StepRecord>(&rec)) {
        out += fmt::format(
            "{{\"type\":\"step\",\"rank\":{},\"step\":{},\"start_unix\":{:.6f},"
            "\"duration_ms\":{:.3f},\"prefill_seqs\":{},\"prefill_tokens\":{},"
            "\"decode_seqs\":{},\"draft_tokens\":{},\"accepted_tokens\":{},\"preemptions\":{},"
            "\"running\":{},\"waiting\":{}}}\n",
            rank_, s->step, s->start_unix, s->duration_ms, s->prefill_seqs, s->prefill_tokens,
            s->decode_seqs, s->draft_tokens, s->accepted_tokens, s->preemptions, s->running,
            s->waiting);
      } else {
        const auto& r = std::get<RequestRecord>(rec);
        out += fmt::format("{{\"type\":\"request\",\"rank\":{},\"event\":\"{}\",\"seq\":{},"
                           "\"id\":{},\"t_unix\":{:.6f}",
                           rank_, EventName(r), r.seq, util::DumpJson(util::Json(r.request_id)),
                           r.t_unix);
        if (!r.x_request_id.empty()) {
          out += ",\"x_request_id\":" + util::DumpJson(util::Json(r.x_request_id));
        }
        if (r.event == RequestEvent::kFinished) {
          out += fmt::format(",\"reason\":\"{}\",\"prompt_tokens\":{},\"completion_tokens\":{}",
                             ReasonName(r.reason), r.prompt_tokens, r.completion_tokens);
        }
        out += "}\n";
      }
    }
    batch.clear();
    if (!out.empty()) {
      std::fwrite(out.data(), 1, out.size(), file_);
      std::fflush(file_);
    }
    if (stop) {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace deepinfer::engine
