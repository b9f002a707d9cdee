#pragma once

// Writers for the Prometheus text exposition format (0.0.4), shared by `serve`'s and the
// gateway's /metrics. Each appends whole lines to `out`.
// Source: Prometheus "Exposition formats" (text format 0.0.4).
// Threads: all functions are pure (they touch only their arguments).

#include <string>
#include <string_view>

#include "util/histogram.h"

namespace deepinfer::util {

// Escapes a label value (backslash, double quote, line feed) for use between double quotes.
std::string EscapeLabelValue(std::string_view value);

// A sample value as the format spells it: "NaN", "+Inf", "-Inf", or the shortest decimal that
// reads back as `value`.
std::string FormatSampleValue(double value);

// "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram).
void AppendMetricHeader(std::string* out, std::string_view name, std::string_view type,
                        std::string_view help);

// One sample line: `name{labels} value`, or `name value` when `labels` is empty. `labels` is
// the text between the braces (`a="x",b="y"`), values already escaped.
void AppendSample(std::string* out, std::string_view name, std::string_view labels, double value);

// The _bucket (cumulative, with le="+Inf" equal to the count), _sum and _count lines of `h`.
void AppendHistogram(std::string* out, std::string_view name, std::string_view labels,
                     const Histogram& h);

}  // namespace deepinfer::util
