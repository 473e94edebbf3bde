// The engine with its routed experts in expert-worker processes: a run
// directory, the loader (builds or adopts the weight arena, then exits), one
// tandem-expert-worker per slice of the arena's expert region, and, in this
// process, the rest of the model over the arena's dense tensors, sending
// routed work to the workers over shared-memory rings (RemoteExperts).
//
// This is the requester side that `tandem logits` and `tandem run` use by
// default. The gpu worker and coordinator processes (the process-graph
// issue) take the same parts apart further.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/arena/arena.h"
#include "common/debug_hold.h"
#include "common/engine/model.h"
#include "common/shm/child_process.h"
#include "common/shm/run_dir.h"
#include "launcher/graph_state.h"

namespace tandem {

class ModelSource;
class InProcessGraph;
namespace gpu {
class RemoteExperts;
}

struct ExpertGraphOptions {
  std::string model;
  int expert_workers = 0;          // 0: one per NUMA node
  std::string bin_dir;             // tandem-loader etc.; default: this executable's folder
  int64_t tokens_per_message = 64; // ring slot capacity
  std::chrono::seconds start_timeout{600};
  bool restart_workers = true;     // a dead expert worker is restarted, its work re-driven
  // loader:0 or expert:N waits for a debugger before its main loop; the rest
  // of the graph waits for it without a deadline.
  std::optional<HoldTarget> hold;
  std::string command = "run";     // for `tandem ps`
  // More restarts of one worker than this within a minute: it is marked
  // failed and requests that need it get an error.
  int max_restarts_per_minute = 5;
};

// A supervisor thread restarts a dead expert worker at once (then with
// back-off while it keeps dying), without waiting for a request to notice;
// <run>/graph.json tells `tandem ps` the state of every process.
class ExpertGraph {
 public:
  // Starts everything and waits until each expert worker is serving; throws
  // tandem::Error naming the process that failed, with the tail of its log.
  explicit ExpertGraph(const ExpertGraphOptions& o);
  ~ExpertGraph();  // stops the workers and removes the run directory

  engine::Model& model() { return *model_; }
  const std::string& run_dir() const { return run_.path(); }
  std::vector<pid_t> worker_pids() const;
  int restarts() const;
  gpu::RemoteExperts& remote() { return *remote_; }
  const arena::Arena& arena() const { return *arena_; }
  GraphState state() const { return state_.snapshot(); }

 private:
  struct Supervision {
    std::vector<std::chrono::steady_clock::time_point> restarts;  // within the last minute
    std::chrono::steady_clock::time_point retry_at{};              // set while backing off
    bool failed = false;
  };
  void check_workers();
  // RemoteExpertsOptions::restart: starts worker w again if it is gone.
  bool restart_worker(int w);
  void respawn(int w);  // under mu_
  void supervise();
  void supervise_once();

  ExpertGraphOptions options_;
  GraphStateFile state_;
  mutable std::mutex mu_;  // workers_ and supervision_
  std::vector<Supervision> supervision_;
  std::vector<std::string> ready_files_;
  bool stopping_ = false;
  std::condition_variable stop_cv_;
  std::thread supervisor_;

  RunDirectory run_;
  std::unique_ptr<ModelSource> config_source_;
  std::unique_ptr<arena::Arena> arena_;
  std::vector<ChildProcess> workers_;
  std::vector<std::vector<std::string>> worker_argv_;
  std::unique_ptr<gpu::RemoteExperts> remote_;
  std::unique_ptr<engine::Model> model_;
};

// Where the model runs: by default its routed experts run in expert-worker
// processes; single_process keeps everything in this one — from the model
// files, or, with expert_workers > 0, as every role of the graph in one
// process (InProcessGraph: the same arena, slices and order of additions).
struct EngineOptions {
  bool single_process = false;
  int expert_workers = 0;  // 0: one per NUMA node
  std::optional<HoldTarget> hold;  // --hold ROLE:INDEX
  std::string command = "run";     // for `tandem ps`
};

// The model in this process, or its dense part here and its routed experts in
// expert workers (a model without routed experts always runs here).
class LoadedModel {
 public:
  LoadedModel(const std::string& path, const EngineOptions& o);
  ~LoadedModel();
  engine::Model& operator*();
  engine::Model* operator->() { return &**this; }
  ExpertGraph* graph() { return graph_.get(); }

 private:
  std::unique_ptr<ModelSource> src_;
  std::unique_ptr<engine::Model> local_;
  std::unique_ptr<ExpertGraph> graph_;
  std::unique_ptr<InProcessGraph> in_process_;
};

// The worker → NUMA node plan for n workers (0: one per node) on a machine
// with `nodes` nodes: workers spread evenly, several per node when n > nodes.
std::vector<int> plan_worker_nodes(int n, int nodes);

}  // namespace tandem
