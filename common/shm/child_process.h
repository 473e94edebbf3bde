// A child process started by this one (the launcher's workers): fork + exec
// with stdout and stderr going to a log file, reaped by its owner. (Children
// that must not outlive their parent watch it themselves: PR_SET_PDEATHSIG
// would fire when the forking *thread* ends.) Move-only; destroying it stops
// the child (SIGTERM, then SIGKILL after a grace period) and reaps it, so a
// launcher that unwinds on an error leaves no worker behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // Starts argv[0] (a path) with argv; output appended to log_path (created
  // 0600). Throws tandem::Error(kSystem) when it cannot fork or open the
  // log; an exec failure shows as exit code 127 with the reason in the log.
  static ChildProcess spawn(const std::vector<std::string>& argv, const std::string& log_path);

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_; }

  // Non-blocking: true while the child runs (reaps it once it has exited).
  bool running();
  // The raw wait status once exited.
  std::optional<int> status() const { return status_; }
  // Waits up to `timeout` for the child to exit; returns its status if it did.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // SIGTERM, up to `grace` to exit, then SIGKILL; reaps. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  // Sends a signal (no-op once reaped).
  void signal(int sig);

  // "exited with code 1", "killed by signal 9 (Killed)".
  static std::string describe(int status);
  // The last `lines` lines of the child's log, for error messages.
  std::string log_tail(int lines = 20) const;

 private:
  pid_t pid_ = 0;
  std::string name_, log_;
  std::optional<int> status_;
};

}  // namespace tandem
