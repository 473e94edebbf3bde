// What the main() of every service executable shares: --help, an option
// error printed with the usage (exit 2), logging named by role and index,
// SIGINT/SIGTERM setting the stop flag the service polls, and an error that
// escapes the service logged as exit status 1. Each main() keeps its own
// usage text, option parsing and wiring (the `run` function).
#pragma once

#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/log.h"

namespace tandem {

// A flag value in [0, max of T]; throws kInvalidInput naming the flag.
template <class T>
T parse_flag_number(const std::string& flag, const std::string& v) {
  uint64_t n = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || n > uint64_t(std::numeric_limits<T>::max()))
    fail_invalid("{} '{}': expected a non-negative integer", flag, v);
  return T(n);
}

namespace detail {
// Set by the signal handlers service_main() installs (a handler can reach
// nothing else); read through the reference handed to the service.
inline std::atomic<bool> service_stop{false};
}  // namespace detail

// parse(argc, argv) -> Options (throws tandem::Error for bad options);
// identity(options) -> {role, index} for the log; run(options, stop) -> exit code.
template <class Parse, class Identity, class Run>
int service_main(int argc, char** argv, const char* program, const char* usage, Parse&& parse, Identity&& identity,
                 Run&& run) {
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << usage;
    return 0;
  }
  decltype(parse(argc, argv)) options;
  try {
    options = parse(argc, argv);
  } catch (const Error& e) {
    std::cerr << program << ": " << e.what() << "\n" << usage;
    return 2;
  }
  const auto [role, index] = identity(options);
  init_logging(role, index);
  std::signal(SIGINT, [](int) { detail::service_stop = true; });
  std::signal(SIGTERM, [](int) { detail::service_stop = true; });
  try {
    return run(options, detail::service_stop);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

}  // namespace tandem
