#include "common/log.h"

#include <unistd.h>

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace tandem {

void init_logging(const std::string& role, int index) {
  auto logger = spdlog::stderr_color_mt(role + "/" + std::to_string(index));
  logger->set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [{}/{} pid {}] [%^%l%$] %v", role,
                                  index, ::getpid()));
  if (const char* lvl = std::getenv("TANDEM_LOG")) {
    logger->set_level(spdlog::level::from_str(lvl));
  }
  spdlog::set_default_logger(logger);
}

}  // namespace tandem
