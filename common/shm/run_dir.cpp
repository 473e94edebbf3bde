#include "common/shm/run_dir.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/shm/shm_file.h"

namespace tandem {
namespace fs = std::filesystem;

std::string default_run_base() {
  if (const char* env = std::getenv("TANDEM_RUN_BASE"); env && *env) return env;
  return "/dev/shm/tandem-" + std::to_string(::getuid());
}

void ensure_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    int err = errno;
    throw Error(ErrorKind::kSystem,
                fmt::format("cannot create directory {}: {}", path, std::strerror(err)), err);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) fail_errno(errno, "lstat " + path, __FILE__, __LINE__);
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("{} is not a directory (a symbolic link or file is there): refused", path));
  require_private(st, path, " (chmod 700 it)");
}

std::optional<ProcessId> run_owner_from_name(const std::string& name) {
  // run-<pid>-<start_ticks>-<nonce>
  if (name.rfind("run-", 0) != 0) return std::nullopt;
  size_t a = name.find('-', 4);
  if (a == std::string::npos) return std::nullopt;
  size_t b = name.find('-', a + 1);
  if (b == std::string::npos) return std::nullopt;
  try {
    return parse_process_id(name.substr(4, a - 4) + ":" + name.substr(a + 1, b - a - 1));
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<std::string> sweep_dead_runs(const std::vector<std::string>& bases) {
  std::vector<std::string> removed;
  for (const std::string& base : bases) {
    std::error_code ec;
    if (!fs::is_directory(base, ec)) continue;
    for (const auto& entry : fs::directory_iterator(base, ec)) {
      std::string name = entry.path().filename().string();
      auto owner = run_owner_from_name(name);
      if (!owner || is_alive(*owner)) continue;
      std::error_code rm;
      fs::remove_all(entry.path(), rm);
      if (rm) {
        spdlog::warn("cannot remove the dead run {}: {}", entry.path().string(), rm.message());
      } else {
        spdlog::info("removed the leftovers of dead run {} (owner pid {} is gone)",
                     entry.path().string(), owner->pid);
        removed.push_back(entry.path().string());
      }
    }
  }
  return removed;
}

RunDirectory::RunDirectory(RunDirectory&& o) noexcept
    : path_(std::move(o.path_)), owner_(std::exchange(o.owner_, false)) {
  o.path_.clear();
}

RunDirectory& RunDirectory::operator=(RunDirectory&& o) noexcept {
  if (this != &o) {
    remove();
    path_ = std::move(o.path_);
    o.path_.clear();
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

RunDirectory::~RunDirectory() { remove(); }

RunDirectory RunDirectory::create(const std::string& base) {
  ensure_private_dir(base);
  sweep_dead_runs({base});
  ProcessId me = self_process();
  std::random_device rd;
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string path = fmt::format("{}/run-{}-{}-{:08x}", base, me.pid, me.start_ticks, rd());
    if (::mkdir(path.c_str(), 0700) == 0) {
      RunDirectory d;
      d.path_ = path;
      d.owner_ = true;
      ensure_private_dir(path);  // an ACL or odd umask must not widen it
      return d;
    }
    if (errno != EEXIST) {
      int err = errno;
      throw Error(ErrorKind::kSystem,
                  fmt::format("cannot create run directory {}: {}", path, std::strerror(err)), err);
    }
  }
  throw Error(ErrorKind::kSystem, fmt::format("cannot find a free run directory name in {}", base));
}

RunDirectory RunDirectory::attach(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    int err = errno;
    throw Error(err == ENOENT ? ErrorKind::kNotFound : ErrorKind::kSystem,
                fmt::format("run directory {}: {}", path, std::strerror(err)), err);
  }
  ensure_private_dir(path);
  RunDirectory d;
  d.path_ = path;
  d.owner_ = false;
  return d;
}

std::string RunDirectory::name() const { return fs::path(path_).filename().string(); }

ProcessId RunDirectory::owner_process() const {
  auto id = run_owner_from_name(name());
  if (!id) fail_invalid("{} is not a run directory name", path_);
  return *id;
}

void RunDirectory::remove() {
  if (!owner_ || path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (ec) spdlog::warn("cannot remove run directory {}: {}", path_, ec.message());
  owner_ = false;
}

}  // namespace tandem
