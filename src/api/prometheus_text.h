#pragma once

// Helpers for the Prometheus text exposition format (0.0.4) shared by `serve`'s and the
// gateway's /metrics. Source: Prometheus "Exposition formats".

#include <string>
#include <string_view>

namespace deepinfer::api {

// Escapes a label value (backslash, double quote, line feed) for use between double quotes.
// Thread-safe (pure).
std::string EscapeLabelValue(std::string_view value);

}  // namespace deepinfer::api
