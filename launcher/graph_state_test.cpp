// The graph's state file and the supervisor that keeps it: a worker killed
// while the graph is idle is restarted without waiting for a request and
// shows as ready again; one that keeps dying is backed off and then marked
// failed, and a request that needs it gets an error naming it.
#include "launcher/graph_state.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/shm/run_dir.h"
#include "launcher/expert_graph.h"
#include "tools/gen_model/gen_model.h"

namespace tandem {
namespace {

using namespace std::chrono;

TEST(GraphState, RoundTripsThroughJsonAndRefusesGarbage) {
  GraphState s;
  s.launcher = 42;
  s.command = "serve";
  s.model = "/m.gguf";
  s.run_dir = "/run";
  s.arena = "/run/arena";
  s.arena_bytes = 123456789012ull;
  s.started_unix = 1700000000;
  s.processes.push_back({"expert", 1, 77, 0, "2-3", "restarting", 2, "x"});
  GraphState t = graph_state_from_json(to_json(s), "test");
  EXPECT_EQ(to_json(t), to_json(s));
  ASSERT_NE(t.find("expert", 1), nullptr);
  EXPECT_EQ(t.find("expert", 1)->restarts, 2);
  EXPECT_EQ(t.find("expert", 0), nullptr);
  EXPECT_THROW(graph_state_from_json("{\"launcher\": 1}", "test"), Error);
  EXPECT_THROW(graph_state_from_json("not json", "test"), Error);
}

TEST(GraphState, ListsOnlyLiveRunsWithAStateFile) {
  RunDirectory base_holder = RunDirectory::create();
  const std::string base = base_holder.path();
  RunDirectory live = RunDirectory::create(base);  // owned by this (live) process
  GraphStateFile f;
  GraphState s;
  s.launcher = ::getpid();
  s.run_dir = live.path();
  f.open(live.file("graph.json"), s);
  RunDirectory quiet = RunDirectory::create(base);  // live, but no graph.json: not a graph
  // A run whose owner is dead (pid 1's start time will not match 12345).
  std::filesystem::create_directory(base + "/run-1-12345-deadbeef");
  std::ofstream(base + "/run-1-12345-deadbeef/graph.json") << to_json(s);
  const auto runs = list_live_runs(base);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].run_dir, live.path());
  const auto mem = memory_use(::getpid());
  ASSERT_TRUE(mem.has_value());
  EXPECT_GT(mem->rss_bytes, 0u);
  EXPECT_GT(mem->pss_bytes, 0u);
  EXPECT_FALSE(memory_use(-5).has_value());
  std::filesystem::remove_all(base + "/run-1-12345-deadbeef");
}

class Supervisor : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = RunDirectory::create();
    model_ = run_.file("model.gguf");
    genmodel::GenOptions o;
    o.config = genmodel::preset_config(Arch::kQwen3Moe, "tiny");
    o.dtype = DType::kQ8_0;
    o.progress = false;
    genmodel::generate(o, model_);
  }
  ExpertGraphOptions options() const {
    ExpertGraphOptions o;
    o.model = model_;
    o.expert_workers = 2;
    o.bin_dir = TANDEM_BINARY_DIR "/bin";
    return o;
  }
  // Waits until expert w's entry satisfies pred (or 10 s pass).
  template <class Pred>
  static ProcessEntry wait_for(const ExpertGraph& g, int w, Pred pred) {
    const auto deadline = steady_clock::now() + seconds(10);
    for (;;) {
      GraphState s = g.state();
      ProcessEntry e = *s.find("expert", w);
      if (pred(e) || steady_clock::now() > deadline) return e;
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  RunDirectory run_;
  std::string model_;
};

TEST_F(Supervisor, RestartsAWorkerKilledWhileIdleAndItServesAgain) {
  ExpertGraph g(options());
  auto cache = g.model().new_cache(16);
  const std::vector<uint32_t> prompt{1, 2, 3};
  const std::vector<float> before = g.model().forward(prompt, cache);
  const pid_t old = g.worker_pids()[1];
  const auto t0 = steady_clock::now();
  ::kill(old, SIGKILL);
  ProcessEntry e = wait_for(g, 1, [&](const ProcessEntry& p) { return p.pid != old && p.state == "ready"; });
  const double ms = duration<double, std::milli>(steady_clock::now() - t0).count();
  EXPECT_EQ(e.state, "ready");
  EXPECT_EQ(e.restarts, 1);
  EXPECT_NE(e.pid, old);
  EXPECT_LT(ms, 5000) << "restart took " << ms << " ms";
  std::printf("killed while idle: ready again after %.0f ms\n", ms);
  // The file on disk says the same.
  std::ifstream in(g.run_dir() + "/graph.json");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(graph_state_from_json(ss.str(), "graph.json").find("expert", 1)->pid, e.pid);
  auto cache2 = g.model().new_cache(16);
  EXPECT_EQ(g.model().forward(prompt, cache2), before);
}

TEST_F(Supervisor, AWorkerThatKeepsDyingIsBackedOffThenFailed) {
  ExpertGraphOptions o = options();
  o.max_restarts_per_minute = 3;
  ExpertGraph g(o);
  std::vector<steady_clock::time_point> starts;
  for (int k = 0; k < 3; ++k) {
    const pid_t pid = g.worker_pids()[0];
    ::kill(pid, SIGKILL);
    ProcessEntry e = wait_for(g, 0, [&](const ProcessEntry& p) { return p.pid != pid; });
    ASSERT_NE(e.pid, pid) << "not restarted after kill " << k;
    starts.push_back(steady_clock::now());
  }
  // The third restart came after a back-off of at least 100 ms.
  EXPECT_GE(duration_cast<milliseconds>(starts[2] - starts[1]).count(), 90);
  ::kill(g.worker_pids()[0], SIGKILL);
  ProcessEntry e = wait_for(g, 0, [](const ProcessEntry& p) { return p.state == "failed"; });
  EXPECT_EQ(e.state, "failed");
  auto cache = g.model().new_cache(16);
  const std::vector<uint32_t> prompt{1, 2, 3};
  try {
    g.model().forward(prompt, cache);
    FAIL() << "a failed worker's share was computed";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("expert worker 0"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace tandem
