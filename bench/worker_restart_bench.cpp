// How fast a killed expert worker serves again: for each model, start the
// process graph (loader, 2 expert workers), then repeatedly SIGKILL a worker
// and run a decode step; print the time from the kill to the restarted
// worker's ready message, and the step's time against an undisturbed one.
// The arena is never rebuilt, so the time does not grow with the model.
//   tandem-bench-restart [--model PATH]... [--kills N]
// Without --model: a tiny generated model, build/models/default.gguf and a
// generated Q8_0 model at --preset (e.g. qwen3-30b-a3b-shapes --layers 2,
// about 1.3 GB).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/shm/run_dir.h"
#include "launcher/expert_graph.h"
#include "services/gpu_worker/remote_experts.h"
#include "tools/gen_model/gen_model.h"

namespace {

using namespace std::chrono;
using tandem::ExpertGraph;

double ms(steady_clock::duration d) { return duration<double, std::milli>(d).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void bench_model(const std::string& path, int kills) {
  tandem::ExpertGraphOptions o;
  o.model = path;
  o.expert_workers = 2;
  const auto t0 = steady_clock::now();
  ExpertGraph g(o);
  const double start_ms = ms(steady_clock::now() - t0);
  auto& model = g.model();
  auto cache = model.new_cache(4 + 2 * int64_t(kills) + 8);
  std::vector<uint32_t> prompt{1, 2, 3, 4};
  model.forward(prompt, cache);
  std::vector<double> calm, disturbed, back;
  uint32_t tok = 5;
  for (int i = 0; i < kills; ++i) {
    auto a = steady_clock::now();
    model.forward(std::span(&tok, 1), cache);
    calm.push_back(ms(steady_clock::now() - a));
    const int w = i % 2;
    const pid_t victim = g.worker_pids()[size_t(w)];
    const auto kill_at = steady_clock::now();
    ::kill(victim, SIGKILL);
    model.forward(std::span(&tok, 1), cache);
    disturbed.push_back(ms(steady_clock::now() - kill_at));
    back.push_back(ms(g.remote().ready_at(w) - kill_at));
  }
  std::printf("%-40s arena %8.1f MiB  first start %8.0f ms  kill -> serving again: median %6.1f ms, "
              "max %6.1f ms  (decode step: undisturbed %6.1f ms, with the kill %6.1f ms; %d restarts)\n",
              std::filesystem::path(path).filename().c_str(), double(g.arena().size()) / (1 << 20),
              start_ms, median(back), *std::max_element(back.begin(), back.end()), median(calm),
              median(disturbed), g.restarts());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  int kills = 10;
  std::string preset = "default";
  int layers = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--model") models.push_back(argv[i + 1]);
    else if (a == "--kills") kills = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--preset") preset = argv[i + 1];
    else if (a == "--layers") layers = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: tandem-bench-restart [--model PATH]... [--kills N] [--preset NAME [--layers N]]\n");
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);
  try {
    tandem::RunDirectory scratch = tandem::RunDirectory::create();
    if (models.empty()) {
      auto exe = std::filesystem::read_symlink("/proc/self/exe");
      models.push_back((exe.parent_path().parent_path() / "models" / "default.gguf").string());
      tandem::genmodel::GenOptions g;
      g.config = tandem::genmodel::preset_config(tandem::Arch::kQwen3Moe, "tiny");
      g.dtype = tandem::DType::kQ8_0;
      g.progress = false;
      models.insert(models.begin(), scratch.file("tiny-q8_0.gguf"));
      tandem::genmodel::generate(g, models.front());
      if (preset != "tiny") {
        g.config = tandem::genmodel::preset_config(tandem::Arch::kQwen3Moe, preset);
        if (layers > 0) {
          g.config.n_layers = uint32_t(layers);
          tandem::genmodel::finalize_config(g.config);
        }
        g.progress = true;
        models.push_back(scratch.file(preset + "-q8_0.gguf"));
        tandem::genmodel::generate(g, models.back());
      }
    }
    spdlog::set_level(spdlog::level::err);  // the restarts' warnings are the point; keep the table
    for (const std::string& m : models) bench_model(m, kills);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench-restart: %s\n", e.what());
    return 1;
  }
  return 0;
}
