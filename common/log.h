// Logging: every process names its role, index and pid on every line.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace tandem {

// Sets the default spdlog logger's pattern to carry "role/index pid".
// Level comes from TANDEM_LOG (trace, debug, info, warn, error), default info.
void init_logging(const std::string& role, int index = 0);

}  // namespace tandem
