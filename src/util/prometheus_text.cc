#include "util/prometheus_text.h"

#include <cmath>
#include <iterator>

#include "fmt/format.h"

namespace deepinfer::util {

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatSampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

void AppendMetricHeader(std::string* out, std::string_view name, std::string_view type,
                        std::string_view help) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void AppendSample(std::string* out, std::string_view name, std::string_view labels, double value) {
  if (labels.empty()) {
    fmt::format_to(std::back_inserter(*out), "{} {}\n", name, FormatSampleValue(value));
  } else {
    fmt::format_to(std::back_inserter(*out), "{}{{{}}} {}\n", name, labels,
                   FormatSampleValue(value));
  }
}

void AppendHistogram(std::string* out, std::string_view name, std::string_view labels,
                     const Histogram& h) {
  const std::string_view sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    if (i < h.counts.size()) cumulative += h.counts[i];
    fmt::format_to(std::back_inserter(*out), "{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep,
                   FormatSampleValue(h.bounds[i]), cumulative);
  }
  // The +Inf bucket equals the count by definition, whatever the per-bucket array holds.
  fmt::format_to(std::back_inserter(*out), "{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep,
                 h.count);
  const std::string braces = labels.empty() ? "" : fmt::format("{{{}}}", labels);
  fmt::format_to(std::back_inserter(*out), "{}_sum{} {}\n", name, braces, FormatSampleValue(h.sum));
  fmt::format_to(std::back_inserter(*out), "{}_count{} {}\n", name, braces, h.count);
}

}  // namespace deepinfer::util
