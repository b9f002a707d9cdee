#pragma once

// Batch telemetry: one JSON-lines file per engine rank with a record per engine step and per
// request lifecycle event, for offline analysis (bench/telemetry_report.py). Off unless
// `deepinfer serve` runs with DEEPINFER_BATCH_TELEMETRY_DIR and DEEPINFER_BATCH_TELEMETRY_RUN_ID
// (docs/engine.md, "Batch telemetry").
//
// The engine thread only copies a small record into a bounded queue under a mutex held for the
// push; a writer thread formats and writes. When the queue is full the record is dropped and
// counted (the count is in the file's last record), so a slow disk never slows a step.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/request.h"

namespace deepinfer::engine {

// One engine step. Units: times in seconds since the Unix epoch / milliseconds; counts in
// sequences or tokens.
struct StepRecord {
  int64_t step = 0;           // 1-based step number of the rank
  double start_unix = 0;      // wall clock at the start of the step
  double duration_ms = 0;     // schedule + forward + sampling + bookkeeping
  int32_t prefill_seqs = 0;   // sequences with a prefill chunk
  int32_t prefill_tokens = 0;
  int32_t decode_seqs = 0;    // sequences decoding one token (plus drafts)
  int32_t draft_tokens = 0;   // speculative drafts verified this step
  int32_t accepted_tokens = 0;
  int64_t preemptions = 0;    // during this step
  int32_t running = 0;        // after the step
  int32_t waiting = 0;
};

enum class RequestEvent { kArrived, kQueued, kFirstScheduled, kFirstToken, kFinished };

struct RequestRecord {
  RequestEvent event = RequestEvent::kArrived;
  uint64_t seq = 0;        // the rank's sequence number
  std::string request_id;  // the API's id (chatcmpl-...), possibly empty
  std::string x_request_id;  // kArrived only: the answer's X-Request-Id, possibly empty
  double t_unix = 0;
  // kFinished only:
  FinishReason reason = FinishReason::kNone;  // kCancelled: the "cancelled" event
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

// Where the telemetry of a serve run goes (both from the environment).
struct TelemetryConfig {
  std::string dir;     // must exist
  std::string run_id;  // new each run: [A-Za-z0-9._-], 1-128 characters
  bool enabled() const { return !dir.empty(); }
};

// DEEPINFER_BATCH_TELEMETRY_DIR / DEEPINFER_BATCH_TELEMETRY_RUN_ID; disabled when DIR is unset
// or empty.
// Errors: InvalidArgument "bad_telemetry" when DIR is set but is not an existing folder, or the
//   run id is missing or not a plain name.
absl::StatusOr<TelemetryConfig> TelemetryConfigFromEnv();

// The file of one rank: <dir>/<run_id>.rank<rank>.jsonl.
std::string TelemetryPath(const TelemetryConfig& config, int32_t rank);

class Telemetry {
 public:
  // Creates the rank's file (which must not exist yet) and starts the writer thread.
  // Errors: InvalidArgument "bad_telemetry" when the file exists (a run id is used once) or
  //   cannot be created.
  static absl::StatusOr<std::unique_ptr<Telemetry>> Open(const TelemetryConfig& config,
                                                         int32_t rank, size_t capacity = 65536);
  // Writes what is queued, then the final record (steps, records, dropped), and closes.
  ~Telemetry();

  // Engine thread. Never blocks on the file.
  void Step(const StepRecord& record);
  void Request(RequestRecord record);
  // Seconds since the epoch for a steady-clock time (offset taken at Open).
  double ToUnix(std::chrono::steady_clock::time_point t) const;

 private:
  Telemetry(std::FILE* file, int32_t rank, size_t capacity);
  void Push(std::variant<StepRecord, RequestRecord> record);
  void WriterLoop();

  std::FILE* const file_;
  const int32_t rank_;
  const size_t capacity_;
  double unix_minus_steady_ = 0;

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::variant<StepRecord, RequestRecord>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;
};

}  // namespace deepinfer::engine
