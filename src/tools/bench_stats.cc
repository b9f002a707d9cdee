#include "tools/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace deepinfer::tools {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  p = std::clamp(p, 0.0, 100.0);
  double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution Summarize(std::vector<double> values, const std::vector<double>& percentiles,
                       double scale) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  d.percentiles.assign(percentiles.size(), 0.0);
  if (values.empty()) return d;
  for (double& v : values) v *= scale;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (double v : values) sq += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(sq / static_cast<double>(values.size()));
  d.min = values.front();
  d.max = values.back();
  for (size_t i = 0; i < percentiles.size(); ++i)
    d.percentiles[i] = Percentile(values, percentiles[i]);
  return d;
}

RunMetrics ComputeRunMetrics(const std::vector<RequestRecord>& records, double duration_s,
                             const std::vector<double>& percentiles) {
  RunMetrics m;
  m.num_requests = static_cast<int64_t>(records.size());
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  // Output tokens per whole second since the run start, for the peak throughput.
  std::map<int64_t, double> tokens_per_second;
  double latency_sum = 0;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    if (r.cached_tokens >= 0) {
      m.total_cached_tokens = std::max<int64_t>(m.total_cached_tokens, 0) + r.cached_tokens;
    }
    if (!r.usage_reported) m.usage_reported = false;
    latency_sum += r.e2el_s;
    if (r.output_tokens > 0) ttft.push_back(r.ttft_s);
    if (r.output_tokens > 1) {
      tpot.push_back((r.e2el_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
    }
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2el.push_back(r.e2el_s);
    if (r.output_tokens > 0) {
      // A chunk may carry several tokens (or a token may show no text yet): spread the
      // request's tokens evenly over its chunks.
      double per_chunk =
          static_cast<double>(r.output_tokens) / static_cast<double>(r.itl_s.size() + 1);
      double t = r.start_s + r.ttft_s;
      tokens_per_second[static_cast<int64_t>(std::floor(t))] += per_chunk;
      for (double gap : r.itl_s) {
        t += gap;
        tokens_per_second[static_cast<int64_t>(std::floor(t))] += per_chunk;
      }
    }
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput =
        static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
    m.mean_concurrency = latency_sum / duration_s;
  }
  for (const auto& [second, n] : tokens_per_second) {
    m.peak_output_throughput = std::max(m.peak_output_throughput, n);
  }
  if (m.completed == 0) m.usage_reported = false;
  m.ttft_ms = Summarize(std::move(ttft), percentiles, 1000.0);
  m.tpot_ms = Summarize(std::move(tpot), percentiles, 1000.0);
  m.itl_ms = Summarize(std::move(itl), percentiles, 1000.0);
  m.e2el_ms = Summarize(std::move(e2el), percentiles, 1000.0);
  return m;
}

}  // namespace deepinfer::tools
