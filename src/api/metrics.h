#pragma once

// Prometheus text exposition (format 0.0.4) for GET /metrics: the engine's counters under
// vLLM-compatible names plus the HTTP layer's own deepinfer_* series.
//
// Source: vLLM docs "Production Metrics" (names, the model_name label, finished_reason values);
//   Prometheus "Exposition formats" (text format 0.0.4).

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include <string_view>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "util/histogram.h"

namespace deepinfer::api {

// Request counts and latencies of the HTTP layer.
// Threads: all methods are thread-safe.
class HttpMetrics {
 public:
  HttpMetrics();

  // Records one answered request. `route` must come from a small fixed set (unknown paths are
  // recorded as "other" by the caller) so that label cardinality stays bounded.
  // Units: seconds.
  void Record(std::string_view route, std::string_view method, int status, double seconds);
  // Stop strings found by the API layer: the engine saw these as cancellations.
  void RecordStopStringFinish() { stop_string_finishes_.fetch_add(1, std::memory_order_relaxed); }
  int64_t stop_string_finishes() const {
    return stop_string_finishes_.load(std::memory_order_relaxed);
  }

  // The decode side of a P/D pair (api/pd.h), per request: the time its KV cache took to move
  // (the prefill calls less the prefill side's compute, plus reading and verifying the
  // checkpoints here), the prefill side's compute, and the prompt tokens the checkpoints cover;
  // a request whose prefill failed; the prompt tokens this side computed itself once the
  // request finished (its prompt less the tokens restored or found in its prefix cache).
  // Units: seconds, tokens.
  void RecordPdTransfer(double transfer_s, double prefill_s, int64_t checkpoint_tokens);
  void RecordPdFailure();
  void RecordPdSuffix(int64_t suffix_tokens);
  // Appends the deepinfer_pd_* series (serve calls it on a decode side only).
  void FormatPd(std::string* out) const;

  // Appends the deepinfer_* series; `open_connections` (the HTTP server's count, read by the
  // caller at the scrape) is deepinfer_http_open_connections.
  void Format(int64_t open_connections, std::string* out) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, util::Histogram, std::less<>> durations_ ABSL_GUARDED_BY(mu_);  // by route
  std::atomic<int64_t> stop_string_finishes_{0};
  util::Histogram pd_transfer_ ABSL_GUARDED_BY(mu_);
  util::Histogram pd_prefill_ ABSL_GUARDED_BY(mu_);
  util::Histogram pd_suffix_ ABSL_GUARDED_BY(mu_);
  int64_t pd_checkpoint_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pd_failures_ ABSL_GUARDED_BY(mu_) = 0;
};

// Appends the vllm:* series, each labelled model_name="<model_name>": one sample per metric for
// one engine, one per data-parallel rank (also labelled engine="<rank>", vLLM's DP label) when
// `ranks` holds several. `stop_string_finishes` moves that many finishes from
// finished_reason="abort" to "stop".
void FormatEngineMetrics(const std::vector<engine::EngineStats>& ranks,
                         std::string_view model_name, int64_t stop_string_finishes,
                         std::string* out);

// Appends the deepinfer_prefix_checkpoint_* series from a CheckpointStore's counters
// (engine/prefix_checkpoint.h): saved / restored / rejected (by reason) / dropped / failed /
// evicted counts, restored tokens, the time spent reading and verifying restores, and `bytes`,
// what the folder's checkpoint files take.
void FormatCheckpointMetrics(const engine::CheckpointStore::Counters& c, int64_t bytes,
                             std::string* out);

}  // namespace deepinfer::api
