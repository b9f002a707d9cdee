#pragma once

// Tables (stdout, Markdown pipe tables so they paste into docs) and JSON for `deepinfer bench`.

#include <string>
#include <vector>

#include "tools/bench_needle.h"
#include "tools/bench_stats.h"
#include "util/json.h"

namespace deepinfer::tools {

// Results of one concurrency level of the random dataset.
struct RandomRun {
  int concurrency = 0;
  double request_rate = 0;  // requests/s; infinity when unpaced
  RunMetrics metrics;
};

// Results of one concurrency level of the shared-prefix dataset.
struct PrefixRun {
  int concurrency = 0;
  RunMetrics cold;
  RunMetrics hot;
  double ttft_speedup_p50 = 0;         // cold TTFT p50 / hot TTFT p50
  double hot_cached_tokens_mean = -1;  // -1 when the server did not report it
};

util::Json MetricsJson(const RunMetrics& m, const std::vector<double>& percentiles);
util::Json NeedleJson(const std::vector<NeedleCase>& cases);

std::string RandomTable(const std::vector<RandomRun>& runs, const std::vector<double>& percentiles);
std::string PrefixTable(const std::vector<PrefixRun>& runs, const std::vector<double>& percentiles);
std::string NeedleTable(const std::vector<NeedleCase>& cases);

// "p50", "p99.9".
std::string PercentileName(double p);

}  // namespace deepinfer::tools
