#include "launcher/expert_graph.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/shm/process.h"
#include "common/model/model_source.h"
#include "common/ring/ring.h"
#include "common/shm/numa.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/thread_pool.h"
#include "launcher/in_process_graph.h"
#include "launcher/placement.h"
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

std::string join_ints(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

namespace {

std::string this_executable_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(ErrorKind::kSystem, "cannot read /proc/self/exe: " + ec.message());
  return exe.parent_path().string();
}


std::string require_binary(const std::string& dir, const std::string& name) {
  std::string p = dir + "/" + name;
  if (::access(p.c_str(), X_OK) != 0)
    fail(ErrorKind::kNotFound, "{} is missing (expected next to the tandem binary); rebuild", p);
  return p;
}

}  // namespace

std::string ExpertGraph::binary(const std::string& name) const { return require_binary(bin_dir_, name); }

ExpertGraph::Supervised& ExpertGraph::find(const std::string& role, int index) {
  for (Supervised& p : procs_)
    if (p.role == role && p.index == index) return p;
  fail(ErrorKind::kInternal, "no process {}:{} in this graph", role, index);
}

void ExpertGraph::announce_hold(const std::string& who, pid_t pid) const {
  spdlog::warn("{} (pid {}) waits for a debugger before its main loop; attach with:\n  {}", who, pid,
               debugger_command(pid));
}

ExpertGraph::ExpertGraph(const ExpertGraphOptions& o) : options_(o), run_(RunDirectory::create()) {
  using namespace std::chrono;
  bin_dir_ = o.bin_dir.empty() ? this_executable_dir() : o.bin_dir;
  const std::string loader_bin = binary("tandem-loader");
  const std::string worker_bin = binary("tandem-expert-worker");
  const Topology topo = read_topology();
  placement_ = plan_expert_workers(topo, o.expert_workers);
  std::vector<int> nodes;
  for (const WorkerPlacement& p : placement_) nodes.push_back(p.node);
  const int W = int(nodes.size());
  spdlog::info("topology: {}", topo.describe());
  n_workers_ = W;
  const std::string arena_path = run_.file("arena");
  const auto& sr = o.service_roles;
  // Entries are "role" (index 0) or "role:index".
  auto service_name = [](const std::string& r) { return r.find(':') == std::string::npos ? r + ":0" : r; };
  const bool service_hold =
      o.hold && std::any_of(sr.begin(), sr.end(), [&](const std::string& r) { return service_name(r) == o.hold->name(); });
  if (o.hold && !((o.hold->role == "loader" && o.hold->index == 0) ||
                  (o.hold->role == "expert" && o.hold->index < W) || service_hold)) {
    std::string more;
    for (const std::string& r : sr) more += ", " + service_name(r);
    fail_invalid("--hold {}: no such process; this graph has loader:0, expert:0..{}{}{}", o.hold->name(), W - 1, more,
                 sr.empty() ? " (the rest runs inside the tandem process: debug it with gdb --args tandem ...)" : "");
  }
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
    gs.processes.push_back({"launcher", 0, ::getpid(), -1, join_ints(kernels::allowed_cpus()), "starting", 0,
                            "hosts the gpu worker (host backend) and the coordinator"});
    state_.open(run_.file("graph.json"), gs);
  }
  auto announce = [this](const std::string& who, pid_t pid) { announce_hold(who, pid); };

  // 1. The loader builds the arena (with progress in its log) and exits —
  //    or, when it serves the manifest, stays and is supervised.
  spdlog::info("run {}: building the weight arena for {} expert worker(s)", run_.path(), W);
  std::vector<std::string> loader_argv = {loader_bin, "--model", o.model, "--run-dir", run_.path(),
                                          "--arena", arena_path, "--worker-nodes", join_ints(nodes)};
  if (o.loader_serves) {
    const std::vector<std::string> more = {"--control", "ipc://" + run_.file("control.sock"),
                                           "--coordinator-file", run_.file("coordinator-0.ready"),
                                           "--parent-pid", std::to_string(::getpid()),
                                           "--ready-file", run_.file("loader-0.ready")};
    loader_argv.insert(loader_argv.end(), more.begin(), more.end());
    std::vector<std::string> argv = loader_argv;
    if (hold_loader) argv.push_back("--hold");
    std::lock_guard lk(mu_);
    procs_.push_back({"loader", 0, loader_argv, run_.file("loader-0.ready"),
                      ChildProcess::spawn(argv, run_.file("loader-0.log")), {}, {}, false});
    if (hold_loader) announce("loader:0", procs_.back().proc.pid());
    state_.update([&](GraphState& s) {
      s.processes.push_back({"loader", 0, procs_.back().proc.pid(), -1, "", "starting", 0,
                             "owns the arena, serves its manifest"});
      return true;
    });
  }
  if (o.loader_serves) {
    wait_ready(0, deadline);
  } else {
    std::vector<std::string> argv = loader_argv;
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
    if (!o.loader_serves) s.find("loader", 0)->state = "done";
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
  const int64_t T = std::max<int64_t>(1, o.tokens_per_message);
  ring_request_ = RingShape{4, uint32_t(expert::work_bytes(T, c.hidden, top_k))};
  ring_response_ = RingShape{4, uint32_t(expert::result_bytes(T, c.hidden))};
  top_k_ = top_k;
  arena_path_ = arena_path;
  ring_prefix_ = run_.file("experts");
  if (o.requesters < 1 || (o.in_process_requester && o.requesters != 1))
    fail(ErrorKind::kInternal, "{} requester(s) of the expert workers", o.requesters);
  std::vector<std::vector<gpu::ExpertLinkPaths>> links;  // [worker][requester]
  for (int w = 0; w < W; ++w) links.push_back(create_rings(ring_prefix_, w));
  if (o.in_process_requester) {
    std::vector<gpu::ExpertLinkPaths> mine;
    for (const auto& l : links) mine.push_back(l[0]);
    gpu::RemoteExpertsOptions ro;
    if (o.restart_workers) ro.restart = [this](int w) { return restart_worker(w); };
    // A worker under a debugger may sit at a breakpoint for as long as it takes.
    if (hold_expert) ro.reply_timeout = hours(24 * 365);
    ro.max_restarts = 1 << 30;  // the supervisor decides when a worker has failed
    remote_ = std::make_unique<gpu::RemoteExperts>(mine, ro);
  }
  for (int w = 0; w < W; ++w) {
    const bool held = hold_expert && o.hold->index == w;
    const pid_t pid = spawn_expert(w, placement_[size_t(w)], arena_path, links[size_t(w)], held);
    if (held) announce(o.hold->name(), pid);
  }
  if (remote_) {
    remote_->wait_ready(deadline, [this] { check_workers(); });
    auto weights = ModelWeights::from_arena(*arena_);
    model_ = std::make_unique<engine::Model>(c, std::move(weights), kernels::choose_isa_from_environment());
    model_->set_routed_experts(remote_.get());
  } else {
    for (size_t i = 0; i < procs_.size(); ++i)
      if (procs_[i].role == "expert") wait_ready(i, deadline);
  }
  const std::vector<pid_t> pids = worker_pids();
  spdlog::info("{} expert worker(s) serving (pids {}); {}", W, join_ints(std::vector<int>(pids.begin(), pids.end()), " "),
               remote_ ? "the dense part runs here" : "starting the coordinator and the gpu worker");
  state_.update([&](GraphState& s) {
    for (ProcessEntry& p : s.processes)
      if (p.role != "loader" || o.loader_serves) p.state = "ready", p.note = p.role == "expert" ? "" : p.note;
    if (!remote_) s.find("launcher", 0)->note = "supervises the graph";
    return true;
  });
  supervisor_ = std::thread([this] { supervise(); });
}

ChildProcess ExpertGraph::spawn(const std::vector<std::string>& argv, const std::string& log, int inherit_fd) {
  if (inherit_fd < 0) return ChildProcess::spawn(argv, log);
  ::fcntl(inherit_fd, F_SETFD, 0);
  try {
    ChildProcess c = ChildProcess::spawn(argv, log);
    ::fcntl(inherit_fd, F_SETFD, FD_CLOEXEC);
    return c;
  } catch (...) {
    ::fcntl(inherit_fd, F_SETFD, FD_CLOEXEC);
    throw;
  }
}

std::optional<std::string> ExpertGraph::failed_process() const {
  std::lock_guard lk(mu_);
  for (const Supervised& p : procs_)
    if (p.failed) return fmt::format("{}:{}", p.role, p.index);
  return std::nullopt;
}

std::string ExpertGraph::requester_prefix(const std::string& prefix, int r) {
  return r == 0 ? prefix : fmt::format("{}.g{}", prefix, r);
}

std::vector<gpu::ExpertLinkPaths> ExpertGraph::create_rings(const std::string& prefix, int w) {
  std::vector<gpu::ExpertLinkPaths> links;
  for (int r = 0; r < options_.requesters; ++r) {
    const std::string p = requester_prefix(prefix, r);
    links.push_back({fmt::format("{}-{}.req", p, w), fmt::format("{}-{}.res", p, w)});
    RingFile::create(links.back().requests, ring_request_);
    RingFile::create(links.back().responses, ring_response_);
  }
  return links;
}

void ExpertGraph::remove_rings(const std::string& prefix, int workers) const {
  for (int r = 0; r < options_.requesters; ++r)
    for (int w = 0; w < workers; ++w) {
      const std::string p = requester_prefix(prefix, r);
      remove_quietly(fmt::format("{}-{}.req", p, w));
      remove_quietly(fmt::format("{}-{}.res", p, w));
    }
}

pid_t ExpertGraph::spawn_expert(int w, const WorkerPlacement& place, const std::string& arena,
                                const std::vector<gpu::ExpertLinkPaths>& links, bool held) {
  const std::vector<int>& mine = place.cpus;
  const int node = place.node;
  const std::string ready = run_.file(fmt::format("expert-{}.ready", w));
  std::vector<std::string> wargv = {binary("tandem-expert-worker"), "--arena", arena, "--worker", std::to_string(w)};
  for (const gpu::ExpertLinkPaths& l : links)
    wargv.insert(wargv.end(), {"--requests", l.requests, "--responses", l.responses});
  const std::vector<std::string> more = {"--top-k", std::to_string(top_k_), "--threads", std::to_string(mine.size()),
                                         "--cpus", join_ints(mine), "--parent-pid", std::to_string(::getpid()),
                                         "--ready-file", ready};
  wargv.insert(wargv.end(), more.begin(), more.end());
  std::vector<std::string> argv = wargv;  // a restarted worker is not held again
  if (held) argv.push_back("--hold");
  std::lock_guard lk(mu_);
  remove_quietly(ready);  // a predecessor's (scale): not this one's
  procs_.push_back({"expert", w, wargv, ready, ChildProcess::spawn(argv, run_.file(fmt::format("expert-{}.log", w))),
                    {}, {}, false});
  const pid_t pid = procs_.back().proc.pid();
  state_.update([&](GraphState& s) {
    s.processes.push_back({"expert", w, pid, node, join_ints(mine), "starting", 0, held ? "held for a debugger" : ""});
    return true;
  });
  return pid;
}

void ExpertGraph::wait_ready(size_t i, std::chrono::steady_clock::time_point deadline,
                             const std::function<void()>& waiting) {
  using namespace std::chrono;
  for (;;) {
    pid_t pid = 0;
    std::string who, log;
    {
      std::lock_guard lk(mu_);
      Supervised& p = procs_[i];
      who = fmt::format("{}:{}", p.role, p.index);
      pid = p.proc.pid();
      // Ready first: a stop that comes after the process got ready (the
      // launcher slept through both on a loaded machine) is the caller's
      // ordinary shutdown, not a failed start.
      std::ifstream in(p.ready_file);
      pid_t said = 0;
      if (in >> said && said == pid) return;
      if (options_.stop && options_.stop->load()) fail(ErrorKind::kPeerLost, "stopped while waiting for {}", who);
      if (!p.proc.running())
        fail(ErrorKind::kPeerLost, "{} (pid {}) {} before it was ready; its log:\n{}", who, p.proc.pid(),
             ChildProcess::describe(p.proc.status().value_or(-1)), p.proc.log_tail());
      if (steady_clock::now() > deadline)
        fail(ErrorKind::kTimeout, "{} (pid {}) was not ready in time; its log:\n{}", who, pid, p.proc.log_tail());
    }
    if (waiting) waiting();
    std::this_thread::sleep_for(milliseconds(20));
  }
}

pid_t ExpertGraph::add_service(ServiceSpec spec, std::chrono::milliseconds timeout,
                               const std::function<void()>& waiting) {
  using namespace std::chrono;
  const bool held = options_.hold && options_.hold->role == spec.role && options_.hold->index == spec.index;
  std::vector<std::string> argv = spec.argv;  // a restarted process is not held again
  if (held) argv.push_back("--hold");
  size_t i = 0;
  pid_t pid = 0;
  {
    std::lock_guard lk(mu_);
    procs_.push_back({spec.role, spec.index, spec.argv, spec.ready_file,
                      spawn(argv, run_.file(fmt::format("{}-{}.log", spec.role, spec.index)), spec.inherit_fd), {}, {},
                      false, spec.inherit_fd});
    i = procs_.size() - 1;
    pid = procs_.back().proc.pid();
    state_.update([&](GraphState& s) {
      s.processes.push_back({spec.role, spec.index, pid, -1, join_ints(kernels::allowed_cpus()), "starting", 0,
                             held ? "held for a debugger" : spec.note});
      return true;
    });
  }
  if (held) announce_hold(options_.hold->name(), pid);
  wait_ready(i, held ? steady_clock::now() + hours(24 * 365) : steady_clock::now() + timeout, waiting);
  state_.update([&](GraphState& s) {
    ProcessEntry* e = s.find(spec.role, spec.index);
    e->state = "ready";
    e->note = spec.note;
    return true;
  });
  return pid;
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
  // The coordinator first (it stops taking requests and ends the ones in
  // flight with an error), then the others in reverse order, the loader last.
  for (Supervised& p : procs_)
    if (p.role == "coordinator") p.proc.stop(std::chrono::milliseconds(5000));
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it) it->proc.stop();
  // The run directory goes with this object; when something died in it,
  // its logs are what a person will want to read.
  bool troubled = false;
  for (const Supervised& p : procs_) troubled = troubled || p.failed || !p.restarts.empty();
  if (troubled) keep_logs();
}

namespace {
constexpr size_t kKeptLogRuns = 8;
}  // namespace

void ExpertGraph::keep_logs() const {
  namespace fs = std::filesystem;
  try {
    const fs::path dir = fs::path(run_.path()).parent_path() / "logs";
    ensure_private_dir(dir.string());
    const fs::path to = dir / run_.name();
    fs::create_directory(to);
    fs::permissions(to, fs::perms::owner_all, fs::perm_options::replace);
    for (const auto& e : fs::directory_iterator(run_.path()))
      if (e.path().extension() == ".log") fs::copy_file(e.path(), to / e.path().filename());
    spdlog::warn("processes of this run died; their logs are kept in {}", to.string());
    // The run base is usually in memory (/dev/shm): only the newest few stay.
    std::vector<fs::directory_entry> kept{fs::directory_iterator(dir), fs::directory_iterator()};
    std::sort(kept.begin(), kept.end(),
              [](const auto& a, const auto& b) { return a.last_write_time() > b.last_write_time(); });
    for (size_t i = kKeptLogRuns; i < kept.size(); ++i) fs::remove_all(kept[i].path());
  } catch (const std::exception& e) {
    spdlog::warn("could not keep the run's logs: {}", e.what());
  }
}

std::vector<pid_t> ExpertGraph::worker_pids() const {
  std::lock_guard lk(mu_);
  std::vector<pid_t> p;
  for (const Supervised& s : procs_)
    if (s.role == "expert") p.push_back(s.proc.pid());
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
  Supervised& p = find("expert", w);
  if (p.proc.running()) return false;  // running, or started again by the supervisor
  if (p.failed)
    fail(ErrorKind::kPeerLost, "expert worker {} keeps dying ({} restarts within a minute); its log:\n{}", w,
         p.restarts.size(), p.proc.log_tail());
  respawn(p);  // a request waits: no back-off
  return true;
}

void ExpertGraph::respawn(Supervised& p) {
  ChildProcess& c = p.proc;
  const std::string how = c.status() ? ChildProcess::describe(*c.status()) : "is gone";
  const pid_t old = c.pid();
  c = spawn(p.argv, c.log_path(), p.inherit_fd);
  p.restarts.push_back(std::chrono::steady_clock::now());
  p.retry_at = {};
  spdlog::warn("{}:{} (pid {}) {}; started it again as pid {} (the arena is not rebuilt)", p.role, p.index,
               old, how, c.pid());
  state_.update([&](GraphState& s) {
    ProcessEntry* e = s.find(p.role, p.index);
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
  for (Supervised& p : procs_) {
    if (p.failed) continue;
    if (!p.proc.running()) {
      std::erase_if(p.restarts, [&](auto t) { return now - t > minutes(1); });
      if (int(p.restarts.size()) >= options_.max_restarts_per_minute) {
        p.failed = true;
        spdlog::error("{}:{} {} and was restarted {} times within a minute: giving up on it", p.role, p.index,
                      ChildProcess::describe(p.proc.status().value_or(-1)), p.restarts.size());
        state_.update([&](GraphState& s) {
          s.find(p.role, p.index)->state = "failed";
          return true;
        });
        continue;
      }
      if (p.retry_at == steady_clock::time_point{}) {
        const auto n = p.restarts.size();
        p.retry_at = now + (n == 0 ? milliseconds(0) : std::min<milliseconds>(milliseconds(100 << std::min<size_t>(n - 1, 6)), seconds(5)));
      }
      if (now >= p.retry_at) respawn(p);
      continue;
    }
    // Ready once the process has written its pid to its ready file.
    const pid_t pid = p.proc.pid();
    state_.update([&](GraphState& s) {
      ProcessEntry* e = s.find(p.role, p.index);
      if (!e || e->state == "ready" || e->state == "starting") return false;
      std::ifstream in(p.ready_file);
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
  std::lock_guard lk(mu_);
  for (Supervised& p : procs_)
    if (p.role == "expert" && !p.proc.running())
      fail(ErrorKind::kPeerLost, "expert worker {} (pid {}) {} before it was ready; its log:\n{}", p.index,
           p.proc.pid(), ChildProcess::describe(p.proc.status().value_or(-1)), p.proc.log_tail());
}

}  // namespace tandem
