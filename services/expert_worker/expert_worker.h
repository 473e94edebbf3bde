// The expert worker: maps its slice of the weight arena read-only, pins a
// thread pool to its cores, and answers the routed-expert work its
// requesters (gpu workers — a prefill and a decode one — or the launcher's
// in-process one) send over shared-memory rings that they created, one pair
// per requester: read a chunk of tokens, compute this worker's partial sums
// (expert_compute.h), write them back. Each pair has its own receiving
// thread (the first is the main thread); they take turns on the one thread
// pool (under a mutex, not strictly in arrival order).
//
// After attaching it sends a kReady result naming its slice, so the requester
// knows it is serving. A dead requester is not an error: the worker waits
// for a restarted one to re-attach (the ring adopts its new epoch). It exits
// when told to stop (SIGTERM), or when the process that started it is gone.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "common/shm/process.h"
#include "kernels/cpu/cpu_isa.h"

namespace tandem::expert {

struct WorkerOptions {
  std::string arena;       // the arena file
  int worker = 0;          // which slice
  struct Link {
    std::string requests;   // ring the requester writes
    std::string responses;  // ring this worker writes
  };
  std::vector<Link> links;  // one per requester, at least one
  int threads = 1;
  std::vector<int> cpus;   // pin thread i to cpus[i]; empty: not pinned
  std::optional<ProcessId> parent;  // exit when it is gone
  int top_k = 0;           // experts per token (the model's n_experts_used)
  bool hold = false;       // wait for a debugger before serving (debug_hold.h)
  std::string ready_file;  // once serving, this process's pid is written there (for the supervisor)
};

// Parses "0-3,8,10-11"; throws tandem::Error.
std::vector<int> parse_cpu_list(const std::string& text);

int run_expert_worker(const WorkerOptions& o, kernels::CpuIsa isa, const std::atomic<bool>& stop);

}  // namespace tandem::expert
