#include "common/shm/process.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace tandem {
namespace {

// Parses /proc/PID/stat: "pid (comm) state ppid ... starttime(22) ...". comm
// may contain spaces and parentheses, so fields are counted after the last ')'.
std::optional<ProcessId> read_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  char state = 0;
  rest >> state;  // field 3
  if (state == 'Z' || state == 'X' || state == 'x') return std::nullopt;
  for (int f = 4; f < 22; ++f) rest >> field;
  uint64_t start = 0;
  if (!(rest >> start)) return std::nullopt;
  return ProcessId{pid, start};
}

}  // namespace

ProcessId self_process() {
  auto me = read_stat(::getpid());
  if (!me) throw Error(ErrorKind::kSystem, "cannot read /proc/self/stat");
  return *me;
}

std::optional<ProcessId> find_process(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  return read_stat(pid);
}

bool is_alive(const ProcessId& id) {
  auto now = find_process(id.pid);
  return now && now->start_ticks == id.start_ticks;
}

std::string to_string(const ProcessId& id) {
  return std::to_string(id.pid) + ":" + std::to_string(id.start_ticks);
}

ProcessId parse_process_id(const std::string& text) {
  ProcessId id;
  size_t colon = text.find(':');
  const char* b = text.data();
  const char* e = b + text.size();
  if (colon == std::string::npos ||
      std::from_chars(b, b + colon, id.pid).ec != std::errc() ||
      std::from_chars(b + colon + 1, e, id.start_ticks).ptr != e || id.pid <= 0)
    fail_invalid("malformed process id '{}' (expected pid:start_ticks)", text);
  return id;
}

namespace {

// Creates `path` with `flags` (mode 0600) and writes all of `text`.
void write_new_file(const std::string& path, int flags, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | flags, 0600);
  if (fd < 0) throw Error(ErrorKind::kSystem, "cannot create " + path, errno);
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != ssize_t(text.size())) throw Error(ErrorKind::kSystem, "cannot write " + path, err);
}

}  // namespace

void write_file_whole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  write_new_file(tmp, O_TRUNC, text);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(ErrorKind::kSystem, "cannot rename " + tmp + " to " + path, errno);
}

void write_pid_file(const std::string& path) { write_file_whole(path, std::to_string(::getpid()) + "\n"); }

void write_private_file(const std::string& path, const std::string& text) { write_new_file(path, O_EXCL, text); }

void remove_quietly(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

}  // namespace tandem
