// The loader: builds or adopts the run's weight arena, then, when a control
// endpoint is given, serves manifest requests until it is told to stop. It is
// the only process that writes the arena; everything else maps it read-only.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "common/shm/process.h"

namespace zmq {
class context_t;
}

namespace tandem::loader {

struct LoaderOptions {
  std::string model;              // GGUF file or Hugging Face directory
  std::string run_dir;            // the run's private directory
  std::string arena;              // default: <run_dir>/arena
  std::vector<int> worker_nodes{0};
  // Control plane; without an endpoint the loader builds or adopts and exits.
  std::string endpoint;           // e.g. ipc://<run_dir>/control.sock
  std::optional<ProcessId> server;  // the process that answers the endpoint
  uint32_t index = 0, epoch = 0;
  // Instead of --server-pid: the coordinator's pid file; the loader stays
  // and joins every coordinator that writes it (a restarted one too), and
  // exits when `parent` is gone.
  std::string coordinator_file;
  std::optional<ProcessId> parent;
  std::string ready_file;         // once the arena is ready, this process's pid is written there
  int handshake_seconds = 30;
  bool hold = false;              // wait for a debugger before building (debug_hold.h)
};

// Parses "0,0,1" (the NUMA node of each expert worker); throws tandem::Error.
std::vector<int> parse_worker_nodes(const std::string& text);

// Runs the loader; returns the process exit code. `stop` is set by the
// signal handler in main(); the serving loop checks it between polls.
int run_loader(const LoaderOptions& o, zmq::context_t& context, const std::atomic<bool>& stop);

}  // namespace tandem::loader
