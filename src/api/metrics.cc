#include "api/metrics.h"

#include <algorithm>
#include <cmath>

#include "fmt/format.h"
#include "util/prometheus_text.h"

namespace deepinfer::api {
namespace {

// Seconds; covers fast metadata routes up to long generations.
const std::vector<double>& DurationBounds() {
  static const std::vector<double> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25,  0.5,  1.0,
                                              2.5,   5.0,  10.0,  30.0, 60.0, 120.0, 300.0};
  return kBounds;
}

// Tokens: a suffix of a few tokens (the part of the prompt after its last full block) up to a
// whole long prompt (recomputed).
const std::vector<double>& SuffixBounds() {
  static const std::vector<double> kBounds = {0,    1,    4,     16,    64,    256,
                                              1024, 4096, 16384, 65536, 262144};
  return kBounds;
}

}  // namespace

HttpMetrics::HttpMetrics()
    : pd_transfer_(DurationBounds()), pd_prefill_(DurationBounds()), pd_suffix_(SuffixBounds()) {}

void HttpMetrics::RecordPdTransfer(double transfer_s, double prefill_s,
                                   int64_t checkpoint_tokens) {
  absl::MutexLock lock(&mu_);
  pd_transfer_.Observe(std::max(0.0, transfer_s));
  pd_prefill_.Observe(std::max(0.0, prefill_s));
  pd_checkpoint_tokens_ += checkpoint_tokens;
}

void HttpMetrics::RecordPdFailure() {
  absl::MutexLock lock(&mu_);
  ++pd_failures_;
}

void HttpMetrics::RecordPdSuffix(int64_t suffix_tokens) {
  absl::MutexLock lock(&mu_);
  pd_suffix_.Observe(static_cast<double>(std::max<int64_t>(0, suffix_tokens)));
}

void HttpMetrics::FormatPd(std::string* out) const {
  absl::MutexLock lock(&mu_);
  util::AppendMetricHeader(out, "deepinfer_pd_transfer_seconds", "histogram",
                           "P/D decode side: time a request's KV cache took to move (the prefill "
                           "side's checkpoint write, the calls, the read and verification here).");
  util::AppendHistogram(out, "deepinfer_pd_transfer_seconds", "", pd_transfer_);
  util::AppendMetricHeader(out, "deepinfer_pd_prefill_seconds", "histogram",
                           "P/D decode side: time the prefill side computed a request's prompt.");
  util::AppendHistogram(out, "deepinfer_pd_prefill_seconds", "", pd_prefill_);
  util::AppendMetricHeader(out, "deepinfer_pd_suffix_tokens", "histogram",
                           "P/D decode side: prompt tokens a request computed itself (not "
                           "restored from its checkpoint or found in the prefix cache).");
  util::AppendHistogram(out, "deepinfer_pd_suffix_tokens", "", pd_suffix_);
  util::AppendMetricHeader(out, "deepinfer_pd_checkpoint_tokens_total", "counter",
                           "P/D decode side: prompt tokens the prefill side's checkpoints covered.");
  util::AppendSample(out, "deepinfer_pd_checkpoint_tokens_total", "",
                     static_cast<double>(pd_checkpoint_tokens_));
  util::AppendMetricHeader(out, "deepinfer_pd_prefill_failures_total", "counter",
                           "P/D decode side: requests answered 503 pd_prefill_unavailable.");
  util::AppendSample(out, "deepinfer_pd_prefill_failures_total", "",
                     static_cast<double>(pd_failures_));
}

void HttpMetrics::Record(std::string_view route, std::string_view method, int status,
                         double seconds) {
  absl::MutexLock lock(&mu_);
  requests_[{std::string(route), std::string(method), status}]++;
  auto it = durations_.find(route);
  if (it == durations_.end()) {
    it = durations_.emplace(std::string(route), util::Histogram(DurationBounds())).first;
  }
  it->second.Observe(std::max(0.0, seconds));
}

void HttpMetrics::Format(int64_t open_connections, std::string* out) const {
  absl::MutexLock lock(&mu_);
  util::AppendMetricHeader(out, "deepinfer_http_requests_total", "counter",
                           "HTTP requests answered, by route, method and status code.");
  for (const auto& [key, count] : requests_) {
    const auto& [route, method, status] = key;
    util::AppendSample(
        out, "deepinfer_http_requests_total",
        fmt::format("route=\"{}\",method=\"{}\",status=\"{}\"", util::EscapeLabelValue(route),
                    util::EscapeLabelValue(method), status),
        static_cast<double>(count));
  }
  util::AppendMetricHeader(out, "deepinfer_http_request_duration_seconds", "histogram",
                           "Time from a complete request to the end of its response, by route.");
  for (const auto& [route, h] : durations_) {
    util::AppendHistogram(out, "deepinfer_http_request_duration_seconds",
                          fmt::format("route=\"{}\"", util::EscapeLabelValue(route)), h);
  }
  util::AppendMetricHeader(out, "deepinfer_http_open_connections", "gauge",
                           "Open client connections.");
  fmt::format_to(std::back_inserter(*out), "deepinfer_http_open_connections {}\n",
                 open_connections);
}

void FormatEngineMetrics(const std::vector<engine::EngineStats>& ranks,
                         std::string_view model_name, int64_t stop_string_finishes,
                         std::string* out) {
  const std::string model = fmt::format("model_name=\"{}\"", util::EscapeLabelValue(model_name));
  // One engine: the series as vLLM has them; data-parallel ranks: one sample per rank, labelled
  // engine="<rank>" as vLLM labels its DP engines.
  std::vector<std::string> labels;
  for (size_t r = 0; r < ranks.size(); ++r) {
    labels.push_back(ranks.size() == 1 ? model : fmt::format("{},engine=\"{}\"", model, r));
  }
  auto each = [&](std::string_view name, const char* type, std::string_view help, auto value) {
    util::AppendMetricHeader(out, name, type, help);
    for (size_t r = 0; r < ranks.size(); ++r) util::AppendSample(out, name, labels[r], value(ranks[r]));
  };
  auto gauge = [&](std::string_view name, std::string_view help, auto value) {
    each(name, "gauge", help, value);
  };
  auto counter = [&](std::string_view name, std::string_view help, auto value) {
    each(name, "counter", help, value);
  };
  auto histogram = [&](std::string_view name, std::string_view help,
                       util::Histogram engine::EngineStats::*field) {
    util::AppendMetricHeader(out, name, "histogram", help);
    for (size_t r = 0; r < ranks.size(); ++r)
      util::AppendHistogram(out, name, labels[r], ranks[r].*field);
  };
  using S = engine::EngineStats;
  auto d = [](int64_t v) { return static_cast<double>(v); };

  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        [&](const S& s) { return d(s.num_running); });
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        [&](const S& s) { return d(s.num_waiting); });
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        [](const S& s) { return s.kv_cache_usage; });
  gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (old name of vllm:kv_cache_usage_perc).",
        [](const S& s) { return s.kv_cache_usage; });
  counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of tokens.",
          [&](const S& s) { return d(s.prefix_cache_queries); });
  counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of tokens.",
          [&](const S& s) { return d(s.prefix_cache_hits); });
  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
          [&](const S& s) { return d(s.prompt_tokens); });
  counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
          [&](const S& s) { return d(s.generation_tokens); });
  counter("vllm:num_preemptions_total", "Cumulative number of preemptions by the scheduler.",
          [&](const S& s) { return d(s.num_preemptions); });
  // Speculative decoding (MTP drafts): acceptance length = 1 + accepted / drafts, acceptance
  // rate = accepted / draft tokens (vLLM's spec_decode counters).
  counter("vllm:spec_decode_num_drafts_total", "Verification steps that carried drafts.",
          [&](const S& s) { return d(s.spec_num_drafts); });
  counter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
          [&](const S& s) { return d(s.spec_num_draft_tokens); });
  counter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
          [&](const S& s) { return d(s.spec_num_accepted_tokens); });
  counter("deepinfer_structured_output_masks_total",
          "Tokens sampled under a structured-output or tool-choice constraint.",
          [&](const S& s) { return d(s.constraint_masks); });
  counter("deepinfer_structured_output_mask_seconds_total",
          "Engine-thread seconds spent computing and applying those tokens' masks.",
          [](const S& s) { return s.constraint_mask_seconds; });
  counter("deepinfer_images_encoded_total",
          "Images the vision tower encoded (those the encoder cache held are not counted).",
          [&](const S& s) { return d(s.images_encoded); });
  counter("deepinfer_encoder_cache_hits_total",
          "Images whose span rows the encoder cache supplied without encoding them.",
          [&](const S& s) { return d(s.encoder_cache_hits); });
  counter("deepinfer_image_encode_seconds_total",
          "Engine-thread seconds the vision tower spent encoding images.",
          [](const S& s) { return s.image_encode_seconds; });
  if (!ranks.empty() && ranks[0].ep_ranks > 0) {
    // Expert parallelism (engine/expert_parallel.h), rank 0's view.
    gauge("deepinfer_ep_ranks", "Expert-parallel ranks the routed experts are split over.",
          [&](const S& s) { return d(s.ep_ranks); });
    counter("deepinfer_ep_forward_calls_total",
            "Forward calls (main model, MTP, DSpark) every expert-parallel rank replayed.",
            [&](const S& s) { return d(s.ep_forward_calls); });
    counter("deepinfer_ep_exchange_bytes_total",
            "MoE row bytes rank 0 sent to and received from the other ranks.",
            [&](const S& s) { return d(s.ep_exchange_bytes); });
    counter("deepinfer_ep_exchange_seconds_total",
            "Seconds rank 0 spent in the MoE layers' collectives (waits included).",
            [](const S& s) { return s.ep_exchange_seconds; });
    counter("deepinfer_ep_expert_seconds_total",
            "Seconds rank 0 spent running its share of the routed experts.",
            [](const S& s) { return s.ep_expert_seconds; });
    counter("deepinfer_ep_broadcast_bytes_total",
            "Bytes of forward-call descriptions rank 0 broadcast to the other ranks.",
            [&](const S& s) { return d(s.ep_broadcast_bytes); });
    counter("deepinfer_ep_broadcast_seconds_total",
            "Seconds rank 0 spent broadcasting forward calls.",
            [](const S& s) { return s.ep_broadcast_seconds; });
  }
  {
    // vLLM's per-position counter: position i counts the steps that accepted more than i drafts.
    const char* per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
    util::AppendMetricHeader(out, per_pos, "counter",
                             "Accepted draft tokens by their position in the draft block.");
    for (size_t r = 0; r < ranks.size(); ++r) {
      for (int32_t i = 0; i < engine::kMaxSpeculativeTokens; ++i) {
        util::AppendSample(out, per_pos, fmt::format("{},position=\"{}\"", labels[r], i),
                           d(ranks[r].spec_accepted_per_pos[i]));
      }
    }
  }
  gauge("deepinfer_spec_decode_acceptance_length",
        "Mean tokens produced per verification step with drafts (1 + accepted / drafts).",
        [&](const S& s) {
          return s.spec_num_drafts > 0 ? 1.0 + d(s.spec_num_accepted_tokens) / d(s.spec_num_drafts)
                                       : 0.0;
        });

  // FinishReason order: kNone, kStop, kLength, kCancelled, kError. A stop string is found by the
  // API layer, which cancels the engine request; count those as "stop" like vLLM does (spread
  // over the ranks' cancellations in rank order: the API layer does not know the rank).
  const char* name = "vllm:request_success_total";
  util::AppendMetricHeader(out, name, "counter", "Count of finished requests, by finished reason.");
  int64_t left = stop_string_finishes;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int64_t* f = ranks[r].num_requests_finished;
    const int64_t moved = std::clamp<int64_t>(left, 0, f[3]);
    left -= moved;
    const std::string& l = labels[r];
    util::AppendSample(out, name, l + ",finished_reason=\"stop\"", d(f[1] + moved));
    util::AppendSample(out, name, l + ",finished_reason=\"length\"", d(f[2]));
    util::AppendSample(out, name, l + ",finished_reason=\"abort\"", d(f[3] - moved));
    util::AppendSample(out, name, l + ",finished_reason=\"error\"", d(f[4]));
  }

  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            &S::ttft);
  histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
            &S::tpot);
  histogram("vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds (new name of time per output token).",
            &S::tpot);
  histogram("vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.", &S::e2e);
  histogram("vllm:request_queue_time_seconds",
            "Histogram of time spent in the waiting queue in seconds.", &S::queue_time);
}

void FormatCheckpointMetrics(const engine::CheckpointStore::Counters& c, int64_t bytes,
                             std::string* out) {
  auto one = [&](std::string_view name, const char* type, std::string_view help, double v) {
    util::AppendMetricHeader(out, name, type, help);
    util::AppendSample(out, name, "", v);
  };
  auto d = [](int64_t v) { return static_cast<double>(v); };
  one("deepinfer_prefix_checkpoint_saved_total", "counter", "Prefix checkpoints written.",
      d(c.saved));
  one("deepinfer_prefix_checkpoint_saved_bytes_total", "counter",
      "Bytes of prefix checkpoints written.", d(c.saved_bytes));
  one("deepinfer_prefix_checkpoint_restored_total", "counter",
      "Prefix checkpoints read, verified and restored.", d(c.restored));
  one("deepinfer_prefix_checkpoint_restored_tokens_total", "counter",
      "Prompt tokens restored from prefix checkpoints.", d(c.restored_tokens));
  one("deepinfer_prefix_checkpoint_restore_seconds_total", "counter",
      "Seconds spent reading and verifying restored prefix checkpoints.", c.restore_seconds);
  const char* name = "deepinfer_prefix_checkpoint_rejected_total";
  util::AppendMetricHeader(out, name, "counter",
                           "Prefix checkpoints that failed a check (ignored and recomputed).");
  for (int r = 0; r < engine::kNumCheckpointRejects; ++r) {
    util::AppendSample(
        out, name,
        fmt::format("reason=\"{}\"",
                    engine::CheckpointRejectName(static_cast<engine::CheckpointReject>(r))),
        d(c.rejected[r]));
  }
  one("deepinfer_prefix_checkpoint_dropped_total", "counter",
      "Prefix checkpoints not saved: the writer's queue was full or one exceeded the budget.",
      d(c.dropped));
  one("deepinfer_prefix_checkpoint_failed_total", "counter",
      "Prefix checkpoint writes that failed (read-only or full folder).", d(c.failed));
  one("deepinfer_prefix_checkpoint_evicted_total", "counter",
      "Prefix checkpoint files removed to stay within --checkpoint-max-bytes.", d(c.evicted));
  one("deepinfer_prefix_checkpoint_bytes", "gauge",
      "Bytes of prefix checkpoint files in the folder.", d(bytes));
}

}  // namespace deepinfer::api
