#include "util/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace deepinfer::util {

std::optional<int64_t> ParseByteSize(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return std::nullopt;
  const std::string number(text.substr(0, i));
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  std::string unit;
  for (char c : text.substr(i)) {
    if (c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  double scale = 0;
  constexpr std::string_view kPrefixes = "kmgt";
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (const size_t p = kPrefixes.find(unit[0]); p != std::string_view::npos) {
    const std::string rest = unit.substr(1);
    if (rest.empty() || rest == "i" || rest == "ib") {
      scale = std::pow(1024.0, static_cast<double>(p + 1));
    } else if (rest == "b") {
      scale = std::pow(1000.0, static_cast<double>(p + 1));
    }
  }
  if (scale == 0) return std::nullopt;
  const double bytes = value * scale;
  if (bytes > 9.0e18) return std::nullopt;
  return static_cast<int64_t>(bytes);
}

}  // namespace deepinfer::util
