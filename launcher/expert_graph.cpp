#include "launcher/expert_graph.h"

#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/model/model_source.h"
#include "common/ring/ring.h"
#include "common/shm/numa.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/thread_pool.h"
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

ExpertGraph::ExpertGraph(const ExpertGraphOptions& o) : run_(RunDirectory::create()) {
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
    auto st = loader.wait_for(duration_cast<milliseconds>(deadline - steady_clock::now()));
    if (!st) fail(ErrorKind::kTimeout, "the loader did not finish the arena in {} s; its log:\n{}",
                  o.start_timeout.count(), loader.log_tail());
    if (*st != 0)
      fail(ErrorKind::kInvalidInput, "the loader {} while building the arena for {}:\n{}",
           ChildProcess::describe(*st), o.model, loader.log_tail());
  }
  arena_ = std::make_unique<arena::Arena>(arena::Arena::open(arena_path));
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
         "--parent-pid", std::to_string(::getpid())});
    std::vector<std::string> argv = worker_argv_.back();  // a restarted worker is not held again
    const bool held = hold_expert && o.hold->index == w;
    if (held) argv.push_back("--hold");
    workers_.push_back(ChildProcess::spawn(argv, run_.file(fmt::format("expert-{}.log", w))));
    if (held) announce(o.hold->name(), workers_.back().pid());
  }
  remote_->wait_ready(deadline, [this] { check_workers(); });
  auto weights = ModelWeights::from_arena(*arena_);
  model_ = std::make_unique<engine::Model>(c, std::move(weights), kernels::choose_isa_from_environment());
  model_->set_routed_experts(remote_.get());
  const std::vector<pid_t> pids = worker_pids();
  spdlog::info("{} expert worker(s) serving (pids {}); the dense part runs here", W,
               join(std::vector<int>(pids.begin(), pids.end()), " "));
}

ExpertGraph::~ExpertGraph() {
  model_.reset();
  remote_.reset();
  for (ChildProcess& w : workers_) w.stop();
}

std::vector<pid_t> ExpertGraph::worker_pids() const {
  std::vector<pid_t> p;
  for (const ChildProcess& w : workers_) p.push_back(w.pid());
  return p;
}

int ExpertGraph::restarts() const { return remote_ ? remote_->restarts() : 0; }

bool ExpertGraph::restart_worker(int w) {
  ChildProcess& c = workers_.at(size_t(w));
  if (c.running()) return false;
  const std::string how = c.status() ? ChildProcess::describe(*c.status()) : "is gone";
  const pid_t old = c.pid();
  c = ChildProcess::spawn(worker_argv_[size_t(w)], c.log_path());
  spdlog::warn("expert worker {} (pid {}) {}; started it again as pid {} (the arena is not rebuilt)", w,
               old, how, c.pid());
  return true;
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
      graph_ = std::make_unique<ExpertGraph>(g);
      return;
    }
  }
  if (o.hold)
    fail_invalid("--hold {}: everything runs in this process (debug it with gdb --args tandem ...)",
                 o.hold->name());
  src_ = ModelSource::open(path);
  local_ = std::make_unique<engine::Model>(*src_, kernels::choose_isa_from_environment());
}

LoadedModel::~LoadedModel() = default;

void ExpertGraph::check_workers() {
  for (size_t w = 0; w < workers_.size(); ++w)
    if (!workers_[w].running())
      fail(ErrorKind::kPeerLost, "expert worker {} (pid {}) {} before it was ready; its log:\n{}", w,
           workers_[w].pid(), ChildProcess::describe(workers_[w].status().value_or(-1)),
           workers_[w].log_tail());
}

}  // namespace tandem
