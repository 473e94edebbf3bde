// The expert worker and its requester: the work messages, the routed experts
// computed by worker processes against the in-process engine, and the errors
// a requester gets from a bad request, a killed worker or a broken model.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/arena/arena.h"
#include "common/engine/model.h"
#include "common/error.h"
#include "common/model/model_source.h"
#include "common/ring/ring.h"
#include "common/shm/child_process.h"
#include "common/shm/run_dir.h"
#include "launcher/expert_graph.h"
#include "services/expert_worker/work_message.h"
#include "services/gpu_worker/remote_experts.h"
#include "tools/gen_model/gen_model.h"

namespace tandem {
namespace {

using namespace std::chrono;

const std::string kBin = std::string(TANDEM_BINARY_DIR) + "/bin";

TEST(WorkMessage, RoundTripsAndRejectsMalformed) {
  const int64_t n = 3, H = 8;
  const int K = 2;
  std::vector<float> x(n * H), w(n * K);
  std::vector<int32_t> ids(n * K);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.5f;
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i), w[i] = 1.0f / float(i + 1);
  std::vector<std::byte> slot(expert::work_bytes(n, H, K));
  expert::WorkHeader h;
  h.id = 42;
  h.layer = 5;
  h.n_tokens = int32_t(n);
  h.top_k = K;
  h.hidden = int32_t(H);
  ASSERT_EQ(expert::encode_work(slot, h, x.data(), ids.data(), w.data()), slot.size());
  expert::WorkView v = expert::decode_work(slot);
  EXPECT_EQ(v.header.id, 42u);
  EXPECT_EQ(v.header.layer, 5);
  EXPECT_EQ(std::memcmp(v.x, x.data(), x.size() * 4), 0);
  EXPECT_EQ(std::memcmp(v.expert_ids, ids.data(), ids.size() * 4), 0);
  EXPECT_EQ(std::memcmp(v.expert_weights, w.data(), w.size() * 4), 0);

  auto kind_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;  // "did not throw" — asserted below as not kInvalidInput
  };
  std::span<const std::byte> all(slot);
  EXPECT_EQ(kind_of([&] { expert::decode_work(all.first(slot.size() - 4)); }), ErrorKind::kInvalidInput);
  EXPECT_EQ(kind_of([&] { expert::decode_work(all.first(10)); }), ErrorKind::kInvalidInput);
  slot[0] = std::byte{0};
  EXPECT_EQ(kind_of([&] { expert::decode_work(slot); }), ErrorKind::kInvalidInput);
  std::vector<std::byte> small(64);
  EXPECT_THROW(expert::encode_work(small, h, x.data(), ids.data(), w.data()), Error);
}

// A tiny generated model (Q8_0, whose arithmetic the split leaves exact).
class ExpertGraphTest : public ::testing::Test {
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
  ExpertGraphOptions options(int workers) const {
    ExpertGraphOptions o;
    o.model = model_;
    o.expert_workers = workers;
    o.bin_dir = kBin;
    o.tokens_per_message = 3;  // forces a prompt into several messages per layer
    return o;
  }
  RunDirectory run_;
  std::string model_;
};

TEST_F(ExpertGraphTest, MatchesTheInProcessEngine) {
  auto src = ModelSource::open(model_);
  engine::Model local(*src);
  ExpertGraph graph(options(3));
  const std::vector<uint32_t> prompt{1, 5, 9, 2, 7, 3, 11, 4};
  auto cl = local.new_cache(16), cg = graph.model().new_cache(16);
  std::vector<float> a = local.forward(prompt, cl), b = graph.model().forward(prompt, cg);
  ASSERT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LE(worst, 1e-4f);
  uint32_t next = 6;
  a = local.forward(std::span(&next, 1), cl);
  b = graph.model().forward(std::span(&next, 1), cg);
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LE(worst, 1e-4f);
}

// A Hugging Face FP8 model whose routed gate and up rows are 5120 columns
// long: the loader stores them as fp8_x16 where the expert workers run the
// avx512bf16 level (kernels::expert_matrix_layout), and the graph's logits
// still match the in-process engine's (f32 arithmetic) within the fixtures'
// HF tolerance, for a prompt and a decode step.
TEST(ExpertGraphLongRows, Fp8RowsOf5120ColumnsMatchTheInProcessEngine) {
  RunDirectory run = RunDirectory::create();
  const std::string model = run.file("long-fp8");
  genmodel::GenOptions g;
  g.config = genmodel::preset_config(Arch::kDeepseekV3, "tiny");
  g.config.hidden = 5120;
  g.config.moe.expert_ffn = 32;
  g.dtype = DType::kF8E4M3;
  g.format = genmodel::OutFormat::kHf;
  g.progress = false;
  genmodel::generate(g, model);
  auto src = ModelSource::open(model);
  engine::Model local(*src);
  ExpertGraphOptions o;
  o.model = model;
  o.expert_workers = 1;
  o.bin_dir = kBin;
  ExpertGraph graph(o);
  const std::vector<uint32_t> prompt{1, 5, 9, 2, 7};
  auto cl = local.new_cache(8), cg = graph.model().new_cache(8);
  std::vector<float> a = local.forward(prompt, cl), b = graph.model().forward(prompt, cg);
  uint32_t next = 6;
  std::vector<float> a2 = local.forward(std::span(&next, 1), cl), b2 = graph.model().forward(std::span(&next, 1), cg);
  a.insert(a.end(), a2.begin(), a2.end());
  b.insert(b.end(), b2.begin(), b2.end());
  ASSERT_EQ(a.size(), b.size());
  float worst = 0, largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]));
    largest = std::max(largest, std::fabs(a[i]));
  }
  EXPECT_LE(worst, 2e-3f) << "largest logit " << largest;
  EXPECT_GT(largest, 0.0f);
  run.remove();
}

TEST_F(ExpertGraphTest, AKilledWorkerIsAnErrorNamingItNotAHang) {
  ExpertGraphOptions o = options(2);
  o.restart_workers = false;
  ExpertGraph graph(o);
  const std::vector<uint32_t> prompt{1, 2, 3};
  auto cache = graph.model().new_cache(16);
  graph.model().forward(prompt, cache);
  ASSERT_EQ(::kill(graph.worker_pids()[1], SIGKILL), 0);
  const auto t0 = steady_clock::now();
  try {
    uint32_t next = 4;
    graph.model().forward(std::span(&next, 1), cache);
    FAIL() << "a forward pass with a dead expert worker succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
    EXPECT_NE(std::string(e.what()).find("expert worker 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(steady_clock::now() - t0, seconds(2));
}

// With restarts on (the default), a worker killed between or during forward
// passes is started again on the same arena and rings, and the passes give
// exactly the numbers of an undisturbed run.
TEST_F(ExpertGraphTest, AKilledWorkerIsRestartedAndTheResultIsUnchanged) {
  const std::vector<uint32_t> prompt{1, 5, 9, 2, 7, 3, 11, 4, 8, 10};
  const std::vector<uint32_t> next{6, 12, 13};
  auto run = [&](ExpertGraph& g, bool kill) {
    auto cache = g.model().new_cache(32);
    std::vector<float> out = g.model().forward(prompt, cache);
    for (size_t i = 0; i < next.size(); ++i) {
      if (kill) ::kill(g.worker_pids()[i % 2], SIGKILL);
      if (kill && i == 2) std::this_thread::sleep_for(milliseconds(50));  // dead before the pass
      auto step = g.model().forward(std::span(&next[i], 1), cache);
      out.insert(out.end(), step.begin(), step.end());
    }
    return out;
  };
  ExpertGraph calm(options(2));
  const std::vector<float> expected = run(calm, false);
  ExpertGraph graph(options(2));
  const std::vector<pid_t> before = graph.worker_pids();
  const std::vector<float> got = run(graph, true);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(graph.restarts(), 3);
  EXPECT_NE(graph.worker_pids()[0], before[0]);
  EXPECT_NE(graph.worker_pids()[1], before[1]);
}

// A restart made on a thread that then ends (an HTTP request's thread) must
// leave a worker that keeps serving afterwards.
TEST_F(ExpertGraphTest, AWorkerRestartedFromAShortLivedThreadSurvivesIt) {
  ExpertGraph graph(options(2));
  auto cache = graph.model().new_cache(16);
  const std::vector<uint32_t> prompt{1, 2, 3};
  graph.model().forward(prompt, cache);
  std::thread([&] {
    ::kill(graph.worker_pids()[0], SIGKILL);
    uint32_t t = 4;
    graph.model().forward(std::span(&t, 1), cache);
  }).join();
  EXPECT_EQ(graph.restarts(), 1);
  std::this_thread::sleep_for(milliseconds(100));
  uint32_t t = 5;
  graph.model().forward(std::span(&t, 1), cache);
  EXPECT_EQ(graph.restarts(), 1) << "the restarted worker died with the thread that started it";
}

TEST_F(ExpertGraphTest, ALoaderFailureShowsItsLog) {
  {
    std::fstream f(model_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("XXXX", 4);  // not a GGUF magic any more
  }
  try {
    ExpertGraph graph(options(2));
    FAIL() << "a graph started on a corrupt model";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the loader exited with code 1"), std::string::npos) << m;
    EXPECT_NE(m.find("[loader/0 pid"), std::string::npos) << "the loader's log tail: " << m;
  }
}

// A request the worker refuses (an expert id out of range) comes back as an
// error naming the worker and the reason; the worker keeps serving.
TEST_F(ExpertGraphTest, ABadRequestIsRefusedWithTheReason) {
  auto src = ModelSource::open(model_);
  const ModelConfig& c = src->config();
  const std::string arena_path = run_.file("arena");
  arena::BuildOptions bo;
  bo.worker_nodes = {0};
  bo.on_progress = [](const arena::BuildProgress&) {};
  arena::Arena::build(arena_path, *src, bo);
  gpu::ExpertLinkPaths p{run_.file("w0.req"), run_.file("w0.res")};
  const int K = int(c.moe.n_experts_used);
  RingFile::create(p.requests, {4, uint32_t(expert::work_bytes(4, c.hidden, K))});
  RingFile::create(p.responses, {4, uint32_t(expert::result_bytes(4, c.hidden))});
  gpu::RemoteExperts remote({p});
  ChildProcess worker = ChildProcess::spawn(
      {kBin + "/tandem-expert-worker", "--arena", arena_path, "--worker", "0", "--requests",
       p.requests, "--responses", p.responses, "--top-k", std::to_string(K)},
      run_.file("worker.log"));
  remote.wait_ready(deadline_in(seconds(30)), [&] { ASSERT_TRUE(worker.running()) << worker.log_tail(); });
  std::vector<float> x(c.hidden, 0.1f), w(size_t(K), 0.5f), y(c.hidden);
  std::vector<int32_t> ids(size_t(K), 0);
  ids[1] = int32_t(c.moe.n_experts) + 7;
  const int64_t moe_layer = c.moe.first_k_dense;
  engine::RoutedWork work{moe_layer, 1, K, int64_t(c.hidden), x.data(), ids.data(), w.data(), y.data()};
  remote.start(work);
  try {
    remote.finish();
    FAIL() << "an out-of-range expert id was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert worker 0 failed layer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(worker.running()) << worker.log_tail();
}

TEST(ChildProcess, ReportsExitAndStopsOnDestruction) {
  RunDirectory run = RunDirectory::create();
  ChildProcess bad = ChildProcess::spawn({"/nonexistent/binary"}, run.file("bad.log"));
  auto st = bad.wait_for(seconds(5));
  ASSERT_TRUE(st);
  EXPECT_EQ(ChildProcess::describe(*st), "exited with code 127");
  EXPECT_NE(bad.log_tail().find("exec failed"), std::string::npos);
  pid_t pid;
  {
    ChildProcess sleeper = ChildProcess::spawn({"/bin/sleep", "100"}, run.file("sleep.log"));
    pid = sleeper.pid();
    EXPECT_TRUE(sleeper.running());
  }
  EXPECT_NE(::kill(pid, 0), 0) << "the child outlived its owner";
}

}  // namespace
}  // namespace tandem
