// `--hold ROLE:INDEX`: one process of the graph waits before its main loop
// until a debugger lets it go, so a person can set breakpoints first. The
// process allows any debugger of this user to attach (Yama's ptrace_scope 1
// otherwise lets only ancestors), prints the exact command, and polls a
// global flag the command clears. The rest of the graph waits for it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <string_view>

// Cleared by the debugger (debugger_command); one per process, not a
// singleton service: it is the address gdb writes to.
extern "C" volatile int tandem_hold;

namespace tandem {

struct HoldTarget {
  std::string role;  // "loader", "expert", ...
  int index = 0;
  std::string name() const { return role + ":" + std::to_string(index); }
};

// Parses "expert:1"; throws tandem::Error(kInvalidInput) naming the problem.
HoldTarget parse_hold_target(std::string_view text);

// The command that attaches gdb to `pid`, releases the hold and continues.
std::string debugger_command(pid_t pid);

// Logs the command and waits until the debugger clears tandem_hold or
// `stop` is set (SIGTERM while held still stops the process).
void hold_for_debugger(std::string_view who, const std::atomic<bool>& stop);

}  // namespace tandem
