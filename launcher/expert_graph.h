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
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/arena/arena.h"
#include "common/debug_hold.h"
#include "common/engine/model.h"
#include "common/ring/ring.h"
#include "common/shm/child_process.h"
#include "common/shm/run_dir.h"
#include "launcher/graph_state.h"
#include "launcher/placement.h"

namespace tandem {

class ModelSource;
class InProcessGraph;
namespace gpu {
class RemoteExperts;
struct ExpertLinkPaths;
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
  // false (serve): no requester in this process — the gpu worker process is
  // the requester — so the graph waits for the workers' ready files.
  bool in_process_requester = true;
  // The loader stays after building, serving the manifest to every
  // coordinator of the run (serve); supervised and restarted like the rest.
  bool loader_serves = false;
  // Processes that send the expert workers work (one pair of rings each per
  // worker): the in-process requester, or the gpu workers (a decode and a
  // prefill one with serve --split-roles: 2).
  int requesters = 1;
  // Processes add_service() will start (for --hold's check): "role" (index
  // 0) or "role:index", e.g. {"gpu", "coordinator", "gpu:1"}.
  std::vector<std::string> service_roles;
  // Set by a signal handler: waits for processes to get ready give up.
  const std::atomic<bool>* stop = nullptr;
};

// A further supervised process of the graph (the coordinator, gpu workers).
struct ServiceSpec {
  std::string role;
  int index = 0;
  std::vector<std::string> argv;  // argv[0]: the binary's path (ExpertGraph::binary)
  std::string ready_file;         // where it writes its pid once ready
  std::string note;               // for `tandem ps`
  int inherit_fd = -1;            // a descriptor this process (only) inherits, e.g. the HTTP socket
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
  // Starts a process that the supervisor restarts (with back-off) if it
  // dies, and waits until it has written its pid to its ready file; throws
  // naming it, with its log's tail, if it exits first or takes longer than
  // `timeout` (none while it is held for a debugger).
  // `waiting` is called every 20 ms meanwhile (e.g. to answer the service's
  // handshake when this process is its coordinator).
  pid_t add_service(ServiceSpec spec, std::chrono::milliseconds timeout, const std::function<void()>& waiting = {});
  const RunDirectory& run() const { return run_; }
  // Gpu worker `index` (host backend; role "both", "prefill" or "decode") over
  // this graph's arena and its own expert rings, joining the coordinator of
  // the run. Index r < ExpertGraphOptions::requesters.
  ServiceSpec gpu_worker_spec(int index = 0, const std::string& role = "both") const;
  // A binary next to tandem's; throws kNotFound if it is missing.
  std::string binary(const std::string& name) const;
  int expert_workers() const { return n_workers_; }
  // The current arena and expert ring prefix (<prefix>-W.req/.res).
  std::string arena_path() const;
  std::string ring_prefix() const;
  // Requester r's rings: <requester_prefix(prefix, r)>-W.req/.res (r = 0: prefix).
  static std::string requester_prefix(const std::string& prefix, int r);
  // Re-plans the expert split for n workers (serve only): builds a new arena
  // beside the old one, starts its workers, moves the loader and the gpu
  // worker over (the coordinator replays its running requests into the new
  // gpu worker: they wait, they do not fail), then stops the old workers and
  // deletes the old arena and rings. Throws, leaving the old graph serving,
  // if the new arena or workers cannot be started.
  void scale(int n);
  const std::string& model_path() const { return options_.model; }
  const std::string& run_dir() const { return run_.path(); }
  std::vector<pid_t> worker_pids() const;
  int restarts() const;
  gpu::RemoteExperts& remote() { return *remote_; }
  const arena::Arena& arena() const { return *arena_; }
  GraphState state() const { return state_.snapshot(); }
  // "role:index" of a process the supervisor gave up on, if any.
  std::optional<std::string> failed_process() const;

 private:
  struct Supervised {
    std::string role;
    int index = 0;
    std::vector<std::string> argv;
    std::string ready_file;
    ChildProcess proc;
    std::vector<std::chrono::steady_clock::time_point> restarts;  // within the last minute
    std::chrono::steady_clock::time_point retry_at{};              // set while backing off
    bool failed = false;
    int inherit_fd = -1;
  };
  // Under mu_ (every spawn is): only `inherit_fd` loses close-on-exec, and
  // only while this child is forked.
  static ChildProcess spawn(const std::vector<std::string>& argv, const std::string& log, int inherit_fd = -1);
  void check_workers();
  // RemoteExpertsOptions::restart: starts worker w again if it is gone.
  bool restart_worker(int w);
  void respawn(Supervised& p);  // under mu_
  void supervise();
  void supervise_once();
  // Waits for p's ready file (p.proc exiting first is an error).
  void wait_ready(size_t i, std::chrono::steady_clock::time_point deadline,
                  const std::function<void()>& waiting = {});
  void announce_hold(const std::string& who, pid_t pid) const;
  // Copies RUN/*.log to <run base>/logs/<run name>/ (private to the user);
  // the 8 newest such folders are kept.
  void keep_logs() const;
  // Worker w's pair of rings for every requester, in requester order.
  std::vector<gpu::ExpertLinkPaths> create_rings(const std::string& prefix, int w);
  void remove_rings(const std::string& prefix, int workers) const;
  // Starts expert worker w pinned where `place` says and registers it.
  pid_t spawn_expert(int w, const WorkerPlacement& place, const std::string& arena,
                     const std::vector<gpu::ExpertLinkPaths>& links, bool held);
  // The gpu worker's and the loader's arguments for the current arena and rings.
  void retarget(Supervised& p) const;

  ExpertGraphOptions options_;
  // Before procs_: the children are stopped before the directory is removed,
  // also when the constructor throws.
  RunDirectory run_;
  GraphStateFile state_;
  mutable std::mutex mu_;  // procs_
  // In the order they were started: the loader when it stays, the expert
  // workers, then the services.
  std::vector<Supervised> procs_;
  Supervised& find(const std::string& role, int index);
  int n_workers_ = 0;
  std::string bin_dir_;
  RingShape ring_request_, ring_response_;
  int top_k_ = 0;
  std::string arena_path_, ring_prefix_;  // the current ones (scale() makes new ones)
  int generation_ = 0;                    // scale() count
  std::vector<WorkerPlacement> placement_;  // the expert workers' nodes and CPUs
  bool stopping_ = false;
  std::condition_variable stop_cv_;
  std::thread supervisor_;

  std::unique_ptr<ModelSource> config_source_;
  std::unique_ptr<arena::Arena> arena_;
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

// "0,1,4" (sep ","), e.g. CPU lists and node plans on command lines.
std::string join_ints(const std::vector<int>& v, const char* sep = ",");

}  // namespace tandem
