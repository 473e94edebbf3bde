// Errors: one exception type carrying a message and a stack of context lines
// ("while reading tensor X", "in file Y"), plus helpers that turn failed
// syscalls into exceptions with errno, the expression and the source location.
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace tandem {

// What kind of failure; callers branch on this, humans read the message.
enum class ErrorKind {
  kInvalidInput,   // corrupt or malformed data (files, requests)
  kUnsupported,    // well-formed but not something we implement
  kNotFound,       // a named file, tensor or key is absent
  kSystem,         // a syscall failed (errno attached)
  kTimeout,        // a peer or operation did not answer within its deadline
  kPeerLost,       // a peer process died, restarted, or said it is dying
  kInternal,       // a broken invariant inside Tandem (a bug)
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, int sys_errno = 0);

  ErrorKind kind() const { return kind_; }
  int sys_errno() const { return errno_; }
  // The innermost message without context lines.
  const std::string& message() const { return message_; }
  const std::vector<std::string>& context() const { return context_; }

  // Adds an outer context line; what() is rebuilt as "message\n  while ...".
  void add_context(std::string line);

  const char* what() const noexcept override { return full_.c_str(); }

 private:
  void rebuild();
  ErrorKind kind_;
  int errno_;
  std::string message_;
  std::vector<std::string> context_;
  std::string full_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_invalid(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::kInvalidInput, fmt::format(f, std::forward<Args>(args)...));
}

// Throws kSystem with strerror(errno) appended.
[[noreturn]] void fail_errno(int err, std::string_view what, const char* file, int line);

// Runs fn(); if it throws tandem::Error, adds a context line made by ctx() and
// rethrows. Other exceptions (bad_alloc, json errors) are wrapped into Error.
template <typename Fn, typename Ctx>
decltype(auto) with_context(Ctx&& ctx, Fn&& fn) {
  try {
    return fn();
  } catch (Error& e) {
    e.add_context(ctx());
    throw;
  } catch (const std::exception& e) {
    Error wrapped(ErrorKind::kInvalidInput, e.what());
    wrapped.add_context(ctx());
    throw wrapped;
  }
}

}  // namespace tandem

// Evaluates a syscall-like expression that returns -1 on failure (retrying on
// EINTR) and throws with errno, the expression text and the location.
#define TANDEM_SYSCALL(expr)                                                  \
  ([&]() {                                                                    \
    for (;;) {                                                                \
      auto tandem_rc_ = (expr);                                               \
      if (tandem_rc_ != -1) return tandem_rc_;                                \
      if (errno != EINTR) ::tandem::fail_errno(errno, #expr, __FILE__, __LINE__); \
    }                                                                         \
  }())
