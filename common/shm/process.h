// Process identity that survives pid reuse: a pid plus the process's start
// time in clock ticks since boot (field 22 of /proc/PID/stat). Used wherever
// one process must know whether another one is still the one it talked to:
// the run-directory sweep, handshakes, ring peers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

struct ProcessId {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  bool operator==(const ProcessId&) const = default;
};

// This process.
ProcessId self_process();
// The process that has this pid now; nullopt if none (or it is a zombie).
std::optional<ProcessId> find_process(pid_t pid);
// True while the very process `id` names is running (not a zombie, not a new
// process that reused its pid).
bool is_alive(const ProcessId& id);

// "pid:start_ticks", and back; parse throws tandem::Error on malformed text.
std::string to_string(const ProcessId& id);
ProcessId parse_process_id(const std::string& text);

// Writes `text` to `path` whole: to `path`.tmp (mode 0600), then renamed, so
// a reader sees the old file or the new one, never half of it.
void write_file_whole(const std::string& path, const std::string& text);
// Writes "<this pid>\n" to `path` whole (a temporary file, then rename), the
// way a process tells its supervisor and peers that it is ready.
void write_pid_file(const std::string& path);
// Creates `path` (exclusively, mode 0600, not following links) holding
// `text`: a secret for another process of this user, e.g. an API key.
void write_private_file(const std::string& path, const std::string& text);
// Removes `path` if it is there; errors are ignored (clean-up of files that
// may be gone already: rings, transfer and KV files).
void remove_quietly(const std::string& path);

}  // namespace tandem
