#include "launcher/graph_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/shm/process.h"
#include "common/shm/run_dir.h"

namespace tandem {

using json = nlohmann::json;

ProcessEntry* GraphState::find(const std::string& role, int index) {
  for (ProcessEntry& p : processes)
    if (p.role == role && p.index == index) return &p;
  return nullptr;
}

std::string to_json(const GraphState& s) {
  json procs = json::array();
  for (const ProcessEntry& p : s.processes)
    procs.push_back({{"role", p.role}, {"index", p.index}, {"pid", p.pid}, {"node", p.node}, {"cpus", p.cpus},
                     {"state", p.state}, {"restarts", p.restarts}, {"note", p.note}});
  return json{{"launcher", s.launcher}, {"command", s.command}, {"model", s.model}, {"run_dir", s.run_dir},
              {"arena", s.arena}, {"arena_bytes", s.arena_bytes}, {"started_unix", s.started_unix},
              {"processes", procs}}
      .dump(1);
}

GraphState graph_state_from_json(const std::string& text, const std::string& source) {
  try {
    json j = json::parse(text);
    GraphState s;
    s.launcher = j.at("launcher").get<pid_t>();
    s.command = j.at("command").get<std::string>();
    s.model = j.at("model").get<std::string>();
    s.run_dir = j.at("run_dir").get<std::string>();
    s.arena = j.at("arena").get<std::string>();
    s.arena_bytes = j.at("arena_bytes").get<uint64_t>();
    s.started_unix = j.at("started_unix").get<int64_t>();
    for (const json& p : j.at("processes"))
      s.processes.push_back({p.at("role").get<std::string>(), p.at("index").get<int>(), p.at("pid").get<pid_t>(),
                             p.at("node").get<int>(), p.at("cpus").get<std::string>(),
                             p.at("state").get<std::string>(), p.at("restarts").get<int>(),
                             p.at("note").get<std::string>()});
    return s;
  } catch (const json::exception& e) {
    fail_invalid("{}: not a graph state file: {}", source, e.what());
  }
}

void GraphStateFile::open(std::string path, GraphState initial) {
  std::lock_guard lk(mu_);
  path_ = std::move(path);
  state_ = std::move(initial);
  write();
}

void GraphStateFile::write() { write_file_whole(path_, to_json(state_)); }

std::optional<MemoryUse> memory_use(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  if (!in) return std::nullopt;
  MemoryUse m;
  bool any = false;
  std::string key;
  uint64_t kb = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (!(ls >> key >> kb)) continue;
    if (key == "Rss:") m.rss_bytes = kb * 1024, any = true;
    else if (key == "Pss:") m.pss_bytes = kb * 1024;
  }
  if (!any) return std::nullopt;
  return m;
}

std::vector<GraphState> list_live_runs(const std::string& base) {
  std::vector<GraphState> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    const auto owner = run_owner_from_name(name);
    if (!owner || !is_alive(*owner)) continue;
    std::ifstream in(e.path() / "graph.json");
    if (!in) continue;  // a run that is not a graph (a test's, or one still starting)
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      out.push_back(graph_state_from_json(ss.str(), (e.path() / "graph.json").string()));
    } catch (const Error&) {
      continue;  // being written by an older version: skip rather than fail ps
    }
  }
  std::sort(out.begin(), out.end(), [](const GraphState& a, const GraphState& b) { return a.started_unix < b.started_unix; });
  return out;
}

}  // namespace tandem
