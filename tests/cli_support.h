// Running the real `tandem` binary from a test: its stdout and stderr
// together, and its exit code.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#ifndef TANDEM_BINARY_DIR
#error "tests using cli_support.h define TANDEM_BINARY_DIR (the build directory)"
#endif

namespace tandem {

struct CliResult {
  int code;
  std::string out;  // stdout and stderr together
};

// args is appended to the command line as is (quote what needs quoting).
inline CliResult run_tandem(const std::string& args, bool with_stderr = true) {
  std::string cmd = std::string(TANDEM_BINARY_DIR) + "/bin/tandem " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  CliResult r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline bool has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace tandem
