// Shared helpers of the fixture tests: where the fixtures are, and a skip
// with a clear message when they are absent (users' clones have no ../shared).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace tandem::testing {

inline std::filesystem::path fixtures_dir() {
  if (const char* env = std::getenv("TANDEM_FIXTURES")) return env;
  return std::filesystem::path(TANDEM_SOURCE_DIR) / ".." / "shared" / "fixtures";
}

inline std::filesystem::path source_dir() { return TANDEM_SOURCE_DIR; }

#define TANDEM_REQUIRE_FIXTURES()                                                         \
  if (!std::filesystem::exists(::tandem::testing::fixtures_dir() / "README.md"))          \
  GTEST_SKIP() << "fixtures not found at " << ::tandem::testing::fixtures_dir()           \
               << " (set TANDEM_FIXTURES or clone beside ../shared)"

}  // namespace tandem::testing
