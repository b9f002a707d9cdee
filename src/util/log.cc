#include "util/log.h"

#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace deepinfer::util {

void InitLogging() {
  auto logger = spdlog::get("deepinfer");
  if (!logger) logger = spdlog::stderr_logger_mt("deepinfer");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace deepinfer::util
