#include "tools/bench_report.h"

#include <cmath>

#include "fmt/format.h"

namespace deepinfer::tools {
namespace {

util::Json DistributionJson(const Distribution& d, const std::vector<double>& percentiles) {
  util::Json j = util::Json::object();
  j["count"] = d.count;
  j["mean"] = d.mean;
  j["std"] = d.std;
  j["min"] = d.min;
  j["max"] = d.max;
  for (size_t i = 0; i < percentiles.size() && i < d.percentiles.size(); ++i) {
    j[PercentileName(percentiles[i])] = d.percentiles[i];
  }
  return j;
}

// A Markdown pipe table: header row, separator, rows; columns padded to their widest cell.
std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 3);
  for (size_t c = 0; c < header.size(); ++c) width[c] = std::max(width[c], header[c].size());
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t c = 0; c < width.size(); ++c) {
      std::string cell = c < cells.size() ? cells[c] : "";
      s += " " + cell + std::string(width[c] - std::min(width[c], cell.size()), ' ') + " |";
    }
    return s + "\n";
  };
  std::string out = line(header);
  std::string sep = "|";
  for (size_t w : width) sep += std::string(w + 2, '-') + "|";
  out += sep + "\n";
  for (const auto& row : rows) out += line(row);
  return out;
}

std::string Num(double v, int decimals = 1) { return fmt::format("{:.{}f}", v, decimals); }

}  // namespace

std::string PercentileName(double p) { return fmt::format("p{:g}", p); }

util::Json MetricsJson(const RunMetrics& m, const std::vector<double>& percentiles) {
  util::Json j = util::Json::object();
  j["num_requests"] = m.num_requests;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["duration_s"] = m.duration_s;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["total_cached_tokens"] =
      m.total_cached_tokens < 0 ? util::Json(nullptr) : util::Json(m.total_cached_tokens);
  j["request_throughput"] = m.request_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["peak_output_throughput"] = m.peak_output_throughput;
  j["mean_concurrency"] = m.mean_concurrency;
  j["token_counts_from"] = m.usage_reported ? "usage" : "chunks";
  j["ttft_ms"] = DistributionJson(m.ttft_ms, percentiles);
  j["tpot_ms"] = DistributionJson(m.tpot_ms, percentiles);
  j["itl_ms"] = DistributionJson(m.itl_ms, percentiles);
  j["e2el_ms"] = DistributionJson(m.e2el_ms, percentiles);
  return j;
}

util::Json NeedleJson(const std::vector<NeedleCase>& cases) {
  util::Json list = util::Json::array();
  for (const NeedleCase& c : cases) {
    util::Json checks = util::Json::array();
    for (const NeedleCheck& k : c.checks) {
      checks.push_back(util::Json{{"needle", k.needle}, {"code", k.code}, {"found", k.found}});
    }
    util::Json cached = util::Json::array();
    for (int64_t t : c.cached_tokens) cached.push_back(t < 0 ? util::Json(nullptr) : util::Json(t));
    list.push_back(util::Json{{"name", c.name},
                              {"pass", c.pass},
                              {"detail", c.detail},
                              {"prompt_tokens", c.prompt_tokens},
                              {"checks", checks},
                              {"ttft_ms", c.ttft_ms},
                              {"cached_tokens", cached},
                              {"answers", c.answers}});
  }
  return list;
}

std::string RandomTable(const std::vector<RandomRun>& runs,
                        const std::vector<double>& percentiles) {
  std::vector<std::string> header = {"conc",   "ok",      "fail",  "dur s",
                                     "in tok", "out tok", "req/s", "out tok/s"};
  for (const char* metric : {"TTFT", "TPOT", "ITL", "E2EL"}) {
    for (double p : percentiles)
      header.push_back(fmt::format("{} {} ms", metric, PercentileName(p)));
  }
  std::vector<std::vector<std::string>> rows;
  for (const RandomRun& r : runs) {
    const RunMetrics& m = r.metrics;
    std::vector<std::string> row = {std::to_string(r.concurrency),
                                    std::to_string(m.completed),
                                    std::to_string(m.failed),
                                    Num(m.duration_s, 2),
                                    std::to_string(m.total_input_tokens),
                                    std::to_string(m.total_output_tokens),
                                    Num(m.request_throughput, 2),
                                    Num(m.output_throughput, 1)};
    for (const Distribution* d : {&m.ttft_ms, &m.tpot_ms, &m.itl_ms, &m.e2el_ms}) {
      for (double v : d->percentiles) row.push_back(Num(v, 1));
    }
    rows.push_back(std::move(row));
  }
  return Table(header, rows);
}

std::string PrefixTable(const std::vector<PrefixRun>& runs,
                        const std::vector<double>& percentiles) {
  std::vector<std::string> header = {"conc", "pairs ok", "fail"};
  for (double p : percentiles) header.push_back("cold TTFT " + PercentileName(p) + " ms");
  for (double p : percentiles) header.push_back("hot TTFT " + PercentileName(p) + " ms");
  header.push_back("speedup p50");
  header.push_back("hot cached tok");
  std::vector<std::vector<std::string>> rows;
  for (const PrefixRun& r : runs) {
    std::vector<std::string> row = {std::to_string(r.concurrency),
                                    std::to_string(std::min(r.cold.completed, r.hot.completed)),
                                    std::to_string(r.cold.failed + r.hot.failed)};
    for (double v : r.cold.ttft_ms.percentiles) row.push_back(Num(v, 1));
    for (double v : r.hot.ttft_ms.percentiles) row.push_back(Num(v, 1));
    row.push_back(Num(r.ttft_speedup_p50, 2) + "x");
    row.push_back(r.hot_cached_tokens_mean < 0 ? "n/a" : Num(r.hot_cached_tokens_mean, 0));
    rows.push_back(std::move(row));
  }
  return Table(header, rows);
}

std::string NeedleTable(const std::vector<NeedleCase>& cases) {
  std::vector<std::vector<std::string>> rows;
  for (const NeedleCase& c : cases) {
    std::string found;
    for (const NeedleCheck& k : c.checks) found += k.found ? k.needle : "-";
    std::string ttft;
    for (double t : c.ttft_ms) ttft += (ttft.empty() ? "" : " / ") + Num(t, 0);
    rows.push_back({c.name, c.pass ? "PASS" : "FAIL", std::to_string(c.prompt_tokens), found, ttft,
                    c.detail.substr(0, 100)});
  }
  return Table({"case", "result", "prompt tok", "found", "TTFT ms", "detail"}, rows);
}

}  // namespace deepinfer::tools
