#include "common/shm/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "common/error.h"

namespace tandem {

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, 0)), name_(std::move(o.name_)), log_(std::move(o.log_)),
      status_(o.status_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    stop();
    pid_ = std::exchange(o.pid_, 0);
    name_ = std::move(o.name_);
    log_ = std::move(o.log_);
    status_ = o.status_;
  }
  return *this;
}

ChildProcess::~ChildProcess() { stop(); }

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) fail_invalid("ChildProcess::spawn: empty argv");
  // Everything the child needs is prepared before fork: between fork and
  // exec only async-signal-safe calls are allowed (the parent has threads).
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) throw Error(ErrorKind::kSystem, fmt::format("open log {}: {}", log_path, std::strerror(errno)));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(log);
    throw Error(ErrorKind::kSystem, fmt::format("fork for {}: {}", argv[0], std::strerror(err)));
  }
  if (pid == 0) {
    // No PR_SET_PDEATHSIG: it fires when the *thread* that forked exits, and
    // restarts happen on short-lived request threads. Workers watch their
    // parent themselves (--parent-pid).
    if (::getppid() != parent) ::_exit(126);  // the parent is already gone
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::execv(args[0], args.data());
    const char* msg = "exec failed: ";
    (void)!::write(STDERR_FILENO, msg, std::strlen(msg));
    const char* why = std::strerror(errno);
    (void)!::write(STDERR_FILENO, why, std::strlen(why));
    (void)!::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  ::close(log);
  ChildProcess c;
  c.pid_ = pid;
  c.name_ = argv[0].substr(argv[0].rfind('/') + 1);
  c.log_ = log_path;
  return c;
}

bool ChildProcess::running() {
  if (pid_ == 0 || status_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = st;
    return false;
  }
  return r == 0;
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

void ChildProcess::signal(int sig) {
  if (pid_ != 0 && !status_) ::kill(pid_, sig);
}

void ChildProcess::stop(std::chrono::milliseconds grace) {
  if (pid_ == 0 || status_) return;
  signal(SIGTERM);
  if (wait_for(grace)) return;
  signal(SIGKILL);
  int st = 0;
  if (::waitpid(pid_, &st, 0) == pid_) status_ = st;
}

std::string ChildProcess::describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {:#x}", status);
}

std::string ChildProcess::log_tail(int lines) const {
  std::ifstream in(log_);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (int(last.size()) > lines) last.pop_front();
  }
  std::string out;
  for (const std::string& l : last) out += "  | " + l + "\n";
  return out;
}

}  // namespace tandem
