// What a running graph is made of, for `tandem ps` and `tandem stop`. The
// launcher keeps <run>/graph.json current (written whole to a temporary file
// and renamed, so a reader never sees half of it); ps reads the file of every
// live run under the run base and adds each process's memory from /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct ProcessEntry {
  std::string role;   // "launcher", "loader", "expert"
  int index = 0;
  pid_t pid = 0;
  int node = -1;      // NUMA node (-1: not placed)
  std::string cpus;   // "0-3" ("" when not pinned)
  std::string state;  // starting, ready, restarting, failed, done
  int restarts = 0;
  std::string note;   // e.g. what the launcher process hosts
};

struct GraphState {
  pid_t launcher = 0;
  std::string command;  // "serve", "logits", "run"
  std::string model;
  std::string run_dir;
  std::string arena;
  uint64_t arena_bytes = 0;
  int64_t started_unix = 0;
  std::vector<ProcessEntry> processes;

  ProcessEntry* find(const std::string& role, int index);
};

std::string to_json(const GraphState& s);
// Throws tandem::Error(kInvalidInput) naming `source` for malformed text.
GraphState graph_state_from_json(const std::string& text, const std::string& source);

// The launcher's copy, written to <run_dir>/graph.json on every change.
class GraphStateFile {
 public:
  // Starts writing `initial` to `path` (until then, updates stay in memory).
  void open(std::string path, GraphState initial);
  // Applies f under the lock and rewrites the file; f returns false for "no change".
  template <class F>
  void update(F&& f) {
    std::lock_guard lk(mu_);
    if (f(state_) && !path_.empty()) write();
  }
  GraphState snapshot() const {
    std::lock_guard lk(mu_);
    return state_;
  }

 private:
  void write();
  mutable std::mutex mu_;
  std::string path_;
  GraphState state_;
};

struct MemoryUse {
  uint64_t rss_bytes = 0, pss_bytes = 0;
};
// From /proc/PID/smaps_rollup; nullopt when the process is gone or unreadable.
std::optional<MemoryUse> memory_use(pid_t pid);

// Every run under `base` whose launcher is alive and that has a graph.json.
std::vector<GraphState> list_live_runs(const std::string& base);

}  // namespace tandem
