#include "common/error.h"

#include <cstring>

namespace tandem {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidInput: return "invalid input";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kNotFound: return "not found";
    case ErrorKind::kSystem: return "system error";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kPeerLost: return "peer lost";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

Error::Error(ErrorKind kind, std::string message, int sys_errno)
    : std::runtime_error(message), kind_(kind), errno_(sys_errno), message_(std::move(message)) {
  rebuild();
}

void Error::add_context(std::string line) {
  context_.push_back(std::move(line));
  rebuild();
}

void Error::rebuild() {
  full_ = message_;
  for (const auto& c : context_) {
    full_ += "\n  ";
    full_ += c;
  }
}

void fail_errno(int err, std::string_view what, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  throw Error(ErrorKind::kSystem,
              fmt::format("{}: {} (errno {}) [{}:{}]", what, std::strerror(err), err,
                          base ? base + 1 : file, line),
              err);
}

}  // namespace tandem
