// Joining the coordinator from a process that outlives it (the loader, the
// gpu worker): the launcher restarts a dead coordinator, which writes its pid
// to a file in the run directory once its ROUTER is bound; this waits for a
// live pid there and connects to it, again after every loss.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "common/control/client.h"
#include "common/shm/process.h"

namespace tandem::control {

struct CoordinatorLink {
  std::string endpoint;  // ipc://<run>/control.sock
  std::string pid_file;  // <run>/coordinator-0.ready
  std::optional<ProcessId> parent;  // give up when it is gone (the launcher)
};

// Waits (checking `stop` and the parent every 50 ms) until a coordinator
// named by the pid file welcomes this process; nullopt when stopped or
// orphaned. Failed handshakes are logged and retried.
std::optional<ControlClient> join_coordinator(zmq::context_t& context, const CoordinatorLink& link,
                                              const ClientOptions& options, const std::atomic<bool>& stop);

}  // namespace tandem::control
