// ExpertGraph::scale: a new expert split while `tandem serve` keeps serving.
#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/arena/arena.h"
#include "common/error.h"
#include "common/shm/process.h"
#include "launcher/expert_graph.h"
#include "services/gpu_worker/remote_experts.h"

namespace tandem {
namespace {

// Sets `flag value` in argv (appended when absent).
void set_flag(std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) {
      argv[i + 1] = value;
      return;
    }
  argv.push_back(flag);
  argv.push_back(value);
}

}  // namespace

ServiceSpec ExpertGraph::gpu_worker_spec(int index, const std::string& role) const {
  if (index < 0 || index >= options_.requesters)
    fail(ErrorKind::kInternal, "gpu worker {}: the graph has rings for {} requester(s)", index, options_.requesters);
  const std::string ready = run_.file(fmt::format("gpu-{}.ready", index));
  const std::string what = role == "prefill" ? "prefill"
                         : role == "decode"  ? "decode"
                                             : "prefill and decode";
  return {"gpu", index,
          {binary("tandem-gpu-worker"), "--model", options_.model, "--run-dir", run_.path(), "--arena", arena_path(),
           "--rings", requester_prefix(ring_prefix(), index), "--experts", std::to_string(expert_workers()), "--index",
           std::to_string(index), "--role", role, "--parent-pid", std::to_string(::getpid()), "--ready-file", ready},
          ready, "host backend (" + what + "): attention, router, shared experts, head, sampling"};
}

std::string ExpertGraph::arena_path() const {
  std::lock_guard lk(mu_);
  return arena_path_;
}

std::string ExpertGraph::ring_prefix() const {
  std::lock_guard lk(mu_);
  return ring_prefix_;
}

void ExpertGraph::retarget(Supervised& p) const {
  set_flag(p.argv, "--arena", arena_path_);
  if (p.role == "loader") {
    std::vector<int> nodes;
    for (const WorkerPlacement& w : placement_) nodes.push_back(w.node);
    set_flag(p.argv, "--worker-nodes", join_ints(nodes));
  }
  if (p.role == "gpu") {
    set_flag(p.argv, "--experts", std::to_string(n_workers_));
    set_flag(p.argv, "--rings", requester_prefix(ring_prefix_, p.index));
  }
}

void ExpertGraph::scale(int n) {
  using namespace std::chrono;
  if (remote_) fail(ErrorKind::kUnsupported, "scale needs a `tandem serve` graph (this one's requester is the launcher)");
  if (n < 1) fail_invalid("scale: expert-workers must be at least 1");
  const std::vector<WorkerPlacement> place = plan_expert_workers(read_topology(), n);
  std::vector<int> nodes;
  for (const WorkerPlacement& p : place) nodes.push_back(p.node);
  const int W = int(nodes.size());
  int old_w = 0, gen = 0;
  std::string old_arena, old_prefix;
  {
    std::lock_guard lk(mu_);
    old_w = n_workers_;
    gen = generation_ + 1;
    old_arena = arena_path_;
    old_prefix = ring_prefix_;
  }
  if (W == old_w) {
    spdlog::info("scale: already {} expert worker(s)", W);
    return;
  }
  const std::string arena = run_.file(fmt::format("arena.{}", gen));
  const std::string prefix = run_.file(fmt::format("experts.{}", gen));
  const auto t0 = steady_clock::now();
  spdlog::info("scale: {} -> {} expert worker(s); building {} beside the serving arena", old_w, W, arena);
  // 1. The new arena, by a one-shot loader; the serving graph is untouched.
  {
    ChildProcess b = ChildProcess::spawn({binary("tandem-loader"), "--model", options_.model, "--run-dir", run_.path(),
                                          "--arena", arena, "--worker-nodes", join_ints(nodes)},
                                         run_.file(fmt::format("loader-scale-{}.log", gen)));
    const auto st = b.wait_for(duration_cast<milliseconds>(options_.start_timeout));
    if (!st || *st != 0) {
      const std::string why = st ? ChildProcess::describe(*st) : "did not finish in time";
      const std::string log = b.log_tail();
      b.stop();
      remove_quietly(arena);
      fail(ErrorKind::kInvalidInput, "scale: the loader {} building the arena for {} workers:\n{}", why, W, log);
    }
  }
  // 2. Its rings and workers. The old workers leave supervision (they serve
  //    the old gpu worker until it is replaced) and come back if this fails.
  std::vector<Supervised> old;
  std::vector<ProcessEntry> old_entries;
  {
    std::lock_guard lk(mu_);
    for (auto it = procs_.begin(); it != procs_.end();) {
      if (it->role != "expert") {
        ++it;
        continue;
      }
      old.push_back(std::move(*it));
      it = procs_.erase(it);
    }
    state_.update([&](GraphState& s) {
      for (const ProcessEntry& e : s.processes)
        if (e.role == "expert") old_entries.push_back(e);
      std::erase_if(s.processes, [](const ProcessEntry& e) { return e.role == "expert"; });
      return true;
    });
  }
  try {
    for (int w = 0; w < W; ++w) spawn_expert(w, place[size_t(w)], arena, create_rings(prefix, w), false);
    for (size_t i = 0; i < procs_.size(); ++i)
      if (procs_[i].role == "expert") wait_ready(i, steady_clock::now() + options_.start_timeout);
  } catch (...) {
    std::lock_guard lk(mu_);
    for (Supervised& p : procs_)
      if (p.role == "expert") p.proc.stop();
    std::erase_if(procs_, [](const Supervised& p) { return p.role == "expert"; });
    for (Supervised& p : old) procs_.push_back(std::move(p));
    state_.update([&](GraphState& s) {
      std::erase_if(s.processes, [](const ProcessEntry& e) { return e.role == "expert"; });
      for (const ProcessEntry& e : old_entries) s.processes.push_back(e);
      return true;
    });
    remove_quietly(arena);
    remove_rings(prefix, W);
    throw;
  }
  // 3. The loader and the gpu worker move over (not counted as restarts);
  //    the new gpu worker adopts the running sequences' KV files and the
  //    coordinator sends its lost step again.
  std::vector<size_t> moved;
  {
    std::lock_guard lk(mu_);
    arena_path_ = arena;
    ring_prefix_ = prefix;
    n_workers_ = W;
    placement_ = place;
    generation_ = gen;
    for (size_t i = 0; i < procs_.size(); ++i) {
      Supervised& p = procs_[i];
      if (p.role != "loader" && p.role != "gpu") continue;
      retarget(p);
      p.proc.stop();
      remove_quietly(p.ready_file);
      p.proc = ChildProcess::spawn(p.argv, p.proc.log_path());
      moved.push_back(i);
      state_.update([&](GraphState& s) {
        ProcessEntry* e = s.find(p.role, p.index);
        e->pid = p.proc.pid();
        e->state = "restarting";
        return true;
      });
    }
  }
  for (size_t i : moved) wait_ready(i, steady_clock::now() + options_.start_timeout);
  // 4. The old workers, arena and rings go.
  for (Supervised& p : old) p.proc.stop();
  remove_quietly(old_arena);
  remove_rings(old_prefix, old_w);
  arena_ = std::make_unique<arena::Arena>(arena::Arena::open(arena));
  state_.update([&](GraphState& s) {
    s.arena = arena;
    s.arena_bytes = arena_->size();
    for (ProcessEntry& e : s.processes)
      if (e.role == "expert" || e.role == "loader" || e.role == "gpu") e.state = "ready";
    return true;
  });
  spdlog::info("scale: {} expert worker(s) serving from {} after {:.0f} ms; the old arena is deleted", W, arena,
               duration<double, std::milli>(steady_clock::now() - t0).count());
}

}  // namespace tandem
