#include "util/log.h"

#include <ctime>

#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace deepinfer::util {

std::string PrintableForLog(std::string_view text, size_t max_bytes) {
  std::string out(text.substr(0, max_bytes));
  for (char& c : out) {
    if (c < 0x21 || c > 0x7e) c = '?';
  }
  return out;
}

std::string UtcTimestamp(double unix_seconds) {
  const std::time_t s = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void InitLogging() {
  auto logger = spdlog::get("deepinfer");
  if (!logger) logger = spdlog::stderr_logger_mt("deepinfer");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace deepinfer::util
