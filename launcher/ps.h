// `tandem ps` and `tandem stop`: the running graphs of this user, from the
// graph.json their launchers keep in their run directories (graph_state.h).
#pragma once

#include <chrono>
#include <ostream>
#include <string>

namespace tandem {

struct PsOptions {
  std::string base;  // run base (default_run_base())
  bool json = false;
};
// Prints every live graph: role, index, pid, NUMA node, cores, state,
// restarts, RSS and PSS per process, and the run's summed PSS next to its
// bound (1.1 x arena + 50 MiB per running process; KV caches come on top
// while requests run). Returns 0, also when nothing runs.
int run_ps(const PsOptions& o, std::ostream& out);

struct StopOptions {
  std::string base;
  std::string run;  // a run directory name; empty: every live graph
  std::chrono::seconds timeout{30};
};
// SIGTERM to each graph's launcher, then waits until it is gone (SIGKILL after
// the timeout: its workers exit when their parent does, and the next run
// sweeps what is left). Returns 1 when no such graph runs.
int run_stop(const StopOptions& o, std::ostream& out);

}  // namespace tandem
