#include "launcher/scale.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/shm/process.h"
#include "common/shm/run_dir.h"
#include "launcher/expert_graph.h"
#include "launcher/graph_state.h"

namespace tandem {


int run_scale(const ScaleOptions& o, std::ostream& out) {
  using namespace std::chrono;
  if (o.expert_workers < 1) fail_invalid("scale: give expert-workers=N with N >= 1");
  std::vector<GraphState> serving;
  for (GraphState& g : list_live_runs(o.base.empty() ? default_run_base() : o.base))
    if (g.command == "serve" && (o.run.empty() || std::filesystem::path(g.run_dir).filename() == o.run))
      serving.push_back(std::move(g));
  if (serving.empty()) {
    out << "no serving graph" << (o.run.empty() ? "" : " named " + o.run) << "\n";
    return 1;
  }
  if (serving.size() > 1) {
    out << "several graphs serve; name one with --run:";
    for (const GraphState& g : serving) out << " " << std::filesystem::path(g.run_dir).filename().string();
    out << "\n";
    return 1;
  }
  const std::string dir = serving[0].run_dir;
  const std::string result = dir + "/scale.result";
  std::filesystem::remove(result);
  write_file_whole(dir + "/scale.request", std::to_string(o.expert_workers) + "\n");
  const auto deadline = steady_clock::now() + o.timeout;
  while (steady_clock::now() < deadline) {
    std::ifstream in(result);
    std::stringstream text;
    if (in && (text << in.rdbuf())) {
      out << std::filesystem::path(dir).filename().string() << ": " << text.str();
      return text.str().rfind("ok", 0) == 0 ? 0 : 1;
    }
    if (!std::filesystem::exists(dir)) {
      out << "the graph stopped before it answered\n";
      return 1;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  out << "no answer from the graph in " << o.timeout.count() << " s\n";
  return 1;
}

void serve_scale_request(ExpertGraph& graph) {
  const std::string request = graph.run_dir() + "/scale.request";
  std::ifstream in(request);
  if (!in) return;
  int n = 0;
  in >> n;
  std::error_code ec;
  std::filesystem::remove(request, ec);
  std::string answer;
  try {
    graph.scale(n);
    answer = fmt::format("ok: {} expert worker(s), arena {}\n", graph.expert_workers(), graph.arena_path());
  } catch (const std::exception& e) {
    spdlog::error("scale to {}: {}", n, e.what());
    answer = fmt::format("error: {}\n", e.what());
  }
  try {
    write_file_whole(graph.run_dir() + "/scale.result", answer);
  } catch (const std::exception& e) {
    spdlog::error("scale: {}", e.what());
  }
}

}  // namespace tandem
