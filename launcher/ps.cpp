#include "launcher/ps.h"

#include <signal.h>

#include <ctime>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/shm/process.h"
#include "common/shm/run_dir.h"
#include "launcher/graph_state.h"

namespace tandem {
namespace {

constexpr uint64_t kPerProcessAllowance = 50ull << 20;

std::string mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

std::string base_of(const std::string& b) { return b.empty() ? default_run_base() : b; }

}  // namespace

int run_ps(const PsOptions& o, std::ostream& out) {
  const std::vector<GraphState> runs = list_live_runs(base_of(o.base));
  nlohmann::json all = nlohmann::json::array();
  for (const GraphState& g : runs) {
    const std::string name = std::filesystem::path(g.run_dir).filename().string();
    uint64_t total_pss = 0;
    int live = 0;
    nlohmann::json procs = nlohmann::json::array();
    std::string table = fmt::format("{:<11} {:>5} {:>8} {:>4} {:<8} {:<10} {:>8} {:>11} {:>11}\n", "ROLE", "INDEX",
                                    "PID", "NODE", "CORES", "STATE", "RESTARTS", "RSS", "PSS");
    for (const ProcessEntry& p : g.processes) {
      const std::optional<MemoryUse> found = p.state == "done" ? std::nullopt : memory_use(p.pid);
      const bool mem = found.has_value();
      const MemoryUse m = found.value_or(MemoryUse{});
      // The launcher may not have noticed a death yet; ps says what it sees.
      const std::string state = mem || p.state == "done" || p.state == "failed" ? p.state : "dead";
      if (mem) total_pss += m.pss_bytes, ++live;
      procs.push_back({{"role", p.role}, {"index", p.index}, {"pid", p.pid}, {"node", p.node}, {"cpus", p.cpus},
                       {"state", state}, {"restarts", p.restarts}, {"note", p.note},
                       {"rss_bytes", m.rss_bytes}, {"pss_bytes", m.pss_bytes}});
      table += fmt::format("{:<11} {:>5} {:>8} {:>4} {:<8} {:<10} {:>8} {:>11} {:>11}{}\n", p.role, p.index, p.pid,
                           p.node < 0 ? "-" : std::to_string(p.node), p.cpus.empty() ? "-" : p.cpus, state,
                           p.restarts, mem ? mib(m.rss_bytes) : "-", mem ? mib(m.pss_bytes) : "-",
                           p.note.empty() ? "" : "  (" + p.note + ")");
    }
    const uint64_t bound = uint64_t(1.1 * double(g.arena_bytes)) + kPerProcessAllowance * uint64_t(live);
    all.push_back({{"run", name}, {"run_dir", g.run_dir}, {"command", g.command}, {"model", g.model},
                   {"launcher", g.launcher}, {"arena", g.arena}, {"arena_bytes", g.arena_bytes}, {"started_unix", g.started_unix},
                   {"processes", procs}, {"total_pss_bytes", total_pss}, {"pss_bound_bytes", bound}});
    if (!o.json) {
      out << fmt::format("{}  tandem {}  model {}  arena {}  up {} s\n", name, g.command,
                         std::filesystem::path(g.model).filename().string(), mib(g.arena_bytes),
                         int64_t(::time(nullptr)) - g.started_unix)
          << table
          << fmt::format("summed PSS {} (bound without KV caches: 1.1 x arena + 50 MiB x {} processes = {})\n\n",
                         mib(total_pss), live, mib(bound));
    }
  }
  if (o.json) out << nlohmann::json{{"runs", all}}.dump(1) << "\n";
  else if (runs.empty()) out << "no running graph under " << base_of(o.base) << "\n";
  return 0;
}

int run_stop(const StopOptions& o, std::ostream& out) {
  using namespace std::chrono;
  int stopped = 0;
  for (const GraphState& g : list_live_runs(base_of(o.base))) {
    const std::string name = std::filesystem::path(g.run_dir).filename().string();
    if (!o.run.empty() && o.run != name) continue;
    const auto owner = run_owner_from_name(name);
    if (!owner || !is_alive(*owner)) continue;
    ::kill(owner->pid, SIGTERM);
    const auto deadline = steady_clock::now() + o.timeout;
    while (is_alive(*owner) && steady_clock::now() < deadline) std::this_thread::sleep_for(milliseconds(50));
    if (is_alive(*owner)) {
      ::kill(owner->pid, SIGKILL);
      out << name << ": the launcher (pid " << owner->pid << ") did not stop in " << o.timeout.count()
          << " s; killed it\n";
    } else {
      out << name << ": stopped (launcher pid " << owner->pid << ")\n";
    }
    ++stopped;
  }
  if (stopped == 0) {
    out << (o.run.empty() ? "no running graph" : "no running graph named " + o.run) << " under "
        << base_of(o.base) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace tandem
