#include "launcher/expert_graph.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/model/model_source.h"
#include "common/ring/ring.h"
#include "common/shm/numa.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/thread_pool.h"
#include "launcher/in_process_graph.h"
#include "services/expert_worker/work_message.h"
#include "services/gpu_worker/remote_experts.h"

namespace tandem {

std::vector<int> plan_worker_nodes(int n, int nodes) {
  if (nodes < 1) nodes = 1;
  if (n <= 0) n = nodes;
  std::vector<int> out;
  for (int w = 0; w < n; ++w) out.push_back(int(int64_t(w) * nodes / n));
  return out;
}

namespace {

std::string this_executable_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(ErrorKind::kSystem, "cannot read /proc/self/exe: " + ec.message());
  return exe.parent_path().string();
}

std::string join(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

std::string require_binary(const std::string& dir, const std::string& name) {
  std::string p = dir + "/" + name;
  if (::access(p.c_str(), X_OK) != 0)
    fail(ErrorKind::kNotFound, "{} is missing (expected next to the tandem binary); rebuild", p);
  return p;
}

}  // namespace

ExpertGraph::ExpertGraph(const ExpertGraphOptions& o) : options_(o), run_(RunDirectory::create()) {
  using namespace std::chrono;
  const std::string bin = o.bin_dir.empty() ? this_executable_dir() : o.bin_dir;
  const std::string loader_bin = require_binary(bin, "tandem-loader");
  const std::string worker_bin = require_binary(bin, "tandem-expert-worker");
  const std::vector<int> nodes = plan_worker_nodes(o.expert_workers, numa_node_count());
  const int W = int(nodes.size());
  const std::string arena_path = run_.file("arena");
  if (o.hold && !((o.hold->role == "loader" && o.hold->index == 0) ||
                  (o.hold->role == "expert" && o.hold->index < W)))
    fail_invalid("--hold {}: no such process; this graph has loader:0 and expert:0..{} (the gpu worker "
                 "and coordinator run inside the tandem process: debug them with gdb --args tandem ...)",
                 o.hold->name(), W - 1);
  const bool hold_loader = o.hold && o.hold->role == "loader";
  const bool hold_expert = o.hold && o.hold->role == "expert";
  // A held process waits for a person: no start deadline then.
  const auto deadline = steady_clock::now() + (o.hold ? hours(24 * 365) : o.start_timeout);
  {
    GraphState gs;
    gs.launcher = ::getpid();
    gs.command = o.command;
    gs.model = o.model;
    gs.run_dir = run_.path();
    gs.arena = arena_path;
    gs.started_unix = int64_t(::time(nullptr));
    gs.processes.push_back({"launcher", 0, ::getpid(), -1, join(kernels::allowed_cpus(), ","), "starting", 0,
                            "hosts the gpu worker (host backend) and the coordinator"});
    state_.open(run_.file("graph.json"), gs);
  }
  auto announce = [](const std::string& who, pid_t pid) {
    spdlog::warn("{} (pid {}) waits for a debugger before its main loop; attach with:\n  {}", who, pid,
                 debugger_command(pid));
  };

  // 1. The loader builds the arena (with progress in its log) and exits.
  {
    spdlog::info("run {}: building the weight arena for {} expert worker(s)", run_.path(), W);
    std::vector<std::string> argv = {loader_bin, "--model", o.model, "--run-dir", run_.path(),
                                     "--arena", arena_path, "--worker-nodes", join(nodes, ",")};
    if (hold_loader) argv.push_back("--hold");
    ChildProcess loader = ChildProcess::spawn(argv, run_.file("loader-0.log"));
    if (hold_loader) announce("loader:0", loader.pid());
    state_.update([&](GraphState& s) {
      s.processes.push_back({"loader", 0, loader.pid(), -1, "", "starting", 0, "builds or adopts the arena, then exits"});
      return true;
    });
    auto st = loader.wait_for(duration_cast<milliseconds>(deadline - steady_clock::now()));
    if (!st) fail(ErrorKind::kTimeout, "the loader did not finish the arena in {} s; its log:\n{}",
                  o.start_timeout.count(), loader.log_tail());
    if (*st != 0)
      fail(ErrorKind::kInvalidInput, "the loader {} while building the arena for {}:\n{}",
           ChildProcess::describe(*st), o.model, loader.log_tail());
  }
  arena_ = std::make_unique<arena::Arena>(arena::Arena::open(arena_path));
  state_.update([&](GraphState& s) {
    s.find("loader", 0)->state = "done";
    s.arena_bytes = arena_->size();
    return true;
  });
  config_source_ = ModelSource::open(o.model);  // the config only; weights come from the arena
  const ModelConfig& c = config_source_->config();
  if (c.moe.n_experts == 0)
    fail(ErrorKind::kUnsupported, "{} has no routed experts; expert workers have nothing to do "
         "(use --single-process)", o.model);
  const int top_k = int(c.moe.n_experts_used);

  // 2. One pair of rings per worker, then the workers, each on its share of
  //    this process's CPUs (the requester's threads share them).
  const std::vector<int> cpus = kernels::allowed_cpus();
  const int64_t T = std::max<int64_t>(1, o.tokens_per_message);
  const RingShape req{4, uint32_t(expert::work_bytes(T, c.hidden, top_k))};
  const RingShape res{4, uint32_t(expert::result_bytes(T, c.hidden))};
  std::vector<gpu::ExpertLinkPaths> links;
  for (int w = 0; w < W; ++w) {
    gpu::ExpertLinkPaths p{run_.file(fmt::format("experts-{}.req", w)),
                           run_.file(fmt::format("experts-{}.res", w))};
    RingFile::create(p.requests, req);
    RingFile::create(p.responses, res);
    links.push_back(p);
  }
  gpu::RemoteExpertsOptions ro;
  if (o.restart_workers) ro.restart = [this](int w) { return restart_worker(w); };
  // A worker under a debugger may sit at a breakpoint for as long as it takes.
  if (hold_expert) ro.reply_timeout = hours(24 * 365);
  ro.max_restarts = 1 << 30;  // the supervisor decides when a worker has failed
  remote_ = std::make_unique<gpu::RemoteExperts>(links, ro);
  for (int w = 0; w < W; ++w) {
    const size_t n = cpus.size();
    const size_t b = size_t(w) * n / size_t(W);
    const size_t e = std::max(b + 1, size_t(w + 1) * n / size_t(W));
    std::vector<int> mine(cpus.begin() + long(b % n), cpus.begin() + long(std::min(e, n)));
    worker_argv_.push_back(
        {worker_bin, "--arena", arena_path, "--worker", std::to_string(w), "--requests",
         links[size_t(w)].requests, "--responses", links[size_t(w)].responses, "--top-k",
         std::to_string(top_k), "--threads", std::to_string(mine.size()), "--cpus", join(mine, ","),
         "--parent-pid", std::to_string(::getpid()), "--ready-file", run_.file(fmt::format("expert-{}.ready", w))});
    ready_files_.push_back(run_.file(fmt::format("expert-{}.ready", w)));
    std::vector<std::string> argv = worker_argv_.back();  // a restarted worker is not held again
    const bool held = hold_expert && o.hold->index == w;
    if (held) argv.push_back("--hold");
    workers_.push_back(ChildProcess::spawn(argv, run_.file(fmt::format("expert-{}.log", w))));
    if (held) announce(o.hold->name(), workers_.back().pid());
    state_.update([&](GraphState& s) {
      s.processes.push_back({"expert", w, workers_.back().pid(), nodes[size_t(w)], join(mine, ","), "starting", 0,
                             held ? "held for a debugger" : ""});
      return true;
    });
  }
  remote_->wait_ready(deadline, [this] { check_workers(); });
  auto weights = ModelWeights::from_arena(*arena_);
  model_ = std::make_unique<engine::Model>(c, std::move(weights), kernels::choose_isa_from_environment());
  model_->set_routed_experts(remote_.get());
  const std::vector<pid_t> pids = worker_pids();
  spdlog::info("{} expert worker(s) serving (pids {}); the dense part runs here", W,
               join(std::vector<int>(pids.begin(), pids.end()), " "));
  supervision_.resize(size_t(W));
  state_.update([&](GraphState& s) {
    for (ProcessEntry& p : s.processes)
      if (p.role != "loader") p.state = "ready", p.note = p.role == "expert" ? "" : p.note;
    return true;
  });
  supervisor_ = std::thread([this] { supervise(); });
}

ExpertGraph::~ExpertGraph() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (supervisor_.joinable()) supervisor_.join();
  model_.reset();
  remote_.reset();
  for (ChildProcess& w : workers_) w.stop();
}

std::vector<pid_t> ExpertGraph::worker_pids() const {
  std::lock_guard lk(mu_);
  std::vector<pid_t> p;
  for (const ChildProcess& w : workers_) p.push_back(w.pid());
  return p;
}

int ExpertGraph::restarts() const {
  std::lock_guard lk(mu_);
  int n = 0;
  for (const ProcessEntry& p : state_.snapshot().processes) n += p.role == "expert" ? p.restarts : 0;
  return n;
}

bool ExpertGraph::restart_worker(int w) {
  std::lock_guard lk(mu_);
  ChildProcess& c = workers_.at(size_t(w));
  if (c.running()) return false;  // running, or started again by the supervisor
  Supervision& sv = supervision_.at(size_t(w));
  if (sv.failed)
    fail(ErrorKind::kPeerLost, "expert worker {} keeps dying ({} restarts within a minute); its log:\n{}", w,
         sv.restarts.size(), c.log_tail());
  respawn(w);  // a request waits: no back-off
  return true;
}

void ExpertGraph::respawn(int w) {
  ChildProcess& c = workers_[size_t(w)];
  const std::string how = c.status() ? ChildProcess::describe(*c.status()) : "is gone";
  const pid_t old = c.pid();
  c = ChildProcess::spawn(worker_argv_[size_t(w)], c.log_path());
  Supervision& sv = supervision_[size_t(w)];
  sv.restarts.push_back(std::chrono::steady_clock::now());
  sv.retry_at = {};
  spdlog::warn("expert worker {} (pid {}) {}; started it again as pid {} (the arena is not rebuilt)", w,
               old, how, c.pid());
  state_.update([&](GraphState& s) {
    ProcessEntry* e = s.find("expert", w);
    e->pid = c.pid();
    e->state = "restarting";
    ++e->restarts;
    return true;
  });
}

void ExpertGraph::supervise() {
  std::unique_lock lk(mu_);
  while (!stop_cv_.wait_for(lk, std::chrono::milliseconds(20), [&] { return stopping_; })) {
    try {
      supervise_once();
    } catch (const std::exception& e) {
      spdlog::error("supervisor: {}", e.what());
    }
  }
}

// Under mu_: restarts dead workers (backing off while one keeps dying: 0,
// 0.1, 0.2, 0.4 ... s, at most 5 s) and marks restarted ones ready once they
// say so in their ready file.
void ExpertGraph::supervise_once() {
  using namespace std::chrono;
  const auto now = steady_clock::now();
  for (size_t w = 0; w < workers_.size(); ++w) {
    Supervision& sv = supervision_[w];
    if (sv.failed) continue;
    if (!workers_[w].running()) {
      std::erase_if(sv.restarts, [&](auto t) { return now - t > minutes(1); });
      if (int(sv.restarts.size()) >= options_.max_restarts_per_minute) {
        sv.failed = true;
        spdlog::error("expert worker {} {} and was restarted {} times within a minute: giving up on it", w,
                      ChildProcess::describe(workers_[w].status().value_or(-1)), sv.restarts.size());
        state_.update([&](GraphState& s) {
          s.find("expert", int(w))->state = "failed";
          return true;
        });
        continue;
      }
      if (sv.retry_at == steady_clock::time_point{}) {
        const auto n = sv.restarts.size();
        sv.retry_at = now + (n == 0 ? milliseconds(0) : std::min<milliseconds>(milliseconds(100 << std::min<size_t>(n - 1, 6)), seconds(5)));
      }
      if (now >= sv.retry_at) respawn(int(w));
      continue;
    }
    // Ready once the worker has written its pid to its ready file.
    const pid_t pid = workers_[w].pid();
    state_.update([&](GraphState& s) {
      ProcessEntry* e = s.find("expert", int(w));
      if (e->state == "ready") return false;
      std::ifstream in(ready_files_[w]);
      pid_t said = 0;
      if (!(in >> said) || said != pid) return false;
      e->state = "ready";
      return true;
    });
  }
}

LoadedModel::LoadedModel(const std::string& path, const EngineOptions& o) {
  if (!o.single_process) {
    auto src = ModelSource::open(path);
    if (src->config().moe.n_experts == 0) {
      spdlog::info("{} has no routed experts: running it in this process", path);
    } else {
      ExpertGraphOptions g;
      g.model = path;
      g.expert_workers = o.expert_workers;
      g.hold = o.hold;
      g.command = o.command;
      graph_ = std::make_unique<ExpertGraph>(g);
      return;
    }
  }
  if (o.hold)
    fail_invalid("--hold {}: everything runs in this process (debug it with gdb --args tandem ...)",
                 o.hold->name());
  if (o.expert_workers > 0 && ModelSource::open(path)->config().moe.n_experts > 0) {
    in_process_ = std::make_unique<InProcessGraph>(path, o.expert_workers);
    return;
  }
  src_ = ModelSource::open(path);
  local_ = std::make_unique<engine::Model>(*src_, kernels::choose_isa_from_environment());
}

LoadedModel::~LoadedModel() = default;

engine::Model& LoadedModel::operator*() {
  if (graph_) return graph_->model();
  if (in_process_) return in_process_->model();
  return *local_;
}

void ExpertGraph::check_workers() {
  for (size_t w = 0; w < workers_.size(); ++w)
    if (!workers_[w].running())
      fail(ErrorKind::kPeerLost, "expert worker {} (pid {}) {} before it was ready; its log:\n{}", w,
           workers_[w].pid(), ChildProcess::describe(workers_[w].status().value_or(-1)),
           workers_[w].log_tail());
}

}  // namespace tandem
