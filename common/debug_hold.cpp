#include "common/debug_hold.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/error.h"

extern "C" {
volatile int tandem_hold = 1;
}

namespace tandem {

HoldTarget parse_hold_target(std::string_view text) {
  const size_t colon = text.find(':');
  HoldTarget t;
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size())
    fail_invalid("--hold '{}': expected ROLE:INDEX, e.g. expert:1", text);
  t.role = std::string(text.substr(0, colon));
  const std::string_view idx = text.substr(colon + 1);
  t.index = 0;
  for (char ch : idx) {
    if (ch < '0' || ch > '9' || t.index > 100000) fail_invalid("--hold '{}': '{}' is not an index", text, idx);
    t.index = t.index * 10 + (ch - '0');
  }
  return t;
}

std::string debugger_command(pid_t pid) {
  return fmt::format("gdb -p {} -ex 'set var *(int*)&tandem_hold = 0' -ex continue", pid);
}

void hold_for_debugger(std::string_view who, const std::atomic<bool>& stop) {
  // Without Yama the call fails with EINVAL, and any same-user debugger may attach anyway.
  (void)::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  spdlog::warn("{} (pid {}) is held before its main loop; attach with: {}", who, ::getpid(),
               debugger_command(::getpid()));
  const auto t0 = std::chrono::steady_clock::now();
  while (tandem_hold && !stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!tandem_hold)
    spdlog::info("released by the debugger after {:.1f} s",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace tandem
