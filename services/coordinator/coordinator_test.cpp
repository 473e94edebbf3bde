// The coordinator's parts in one process: generation with stop strings and
// cancellation on a generated model, and the HTTP server's handling of
// malformed requests, limits and routes (through a real socket).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/engine/model.h"
#include "common/model/model_source.h"
#include "common/shm/run_dir.h"
#include "common/text/tokenizer.h"
#include "services/coordinator/generation_test_support.h"
#include "services/coordinator/generator.h"
#include "services/coordinator/http_server.h"
#include "services/coordinator/openai_api.h"
#include "services/gpu_worker/step_runner.h"
#include "tools/gen_model/gen_model.h"

namespace tandem::coordinator {
namespace {

class CoordinatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_ = new testing::GeneratedModel(Arch::kQwen3Moe);
    run_ = &g_->run;
    model_ = g_->model.get();
    tok_ = g_->tok.get();
  }
  static void TearDownTestSuite() { delete g_; }
  static inline testing::GeneratedModel* g_ = nullptr;
  static inline RunDirectory* run_ = nullptr;
  static inline engine::Model* model_ = nullptr;
  static inline text::Tokenizer* tok_ = nullptr;
};

TEST_F(CoordinatorTest, StopStringsCutTheTextAndAreNeverStreamed) {
  gpu::StepRunner runner(*model_);
  Generator gen(runner, *tok_);
  const std::vector<uint32_t> prompt{1, 2, 3, 4};
  GenerationParams p;
  p.max_tokens = 24;
  GenerationResult full = gen.generate(prompt, p);
  ASSERT_EQ(full.finish_reason, "length");
  ASSERT_GE(full.text.size(), 8u) << full.text;
  // A stop string taken from the middle of the greedy text.
  const size_t at = full.text.size() / 2;
  p.stop = {full.text.substr(at, 3)};
  const size_t first = full.text.find(p.stop[0]);
  std::string streamed;
  GenerationResult cut = gen.generate(prompt, p, [&](const TokenEvent& e) {
    streamed += e.delta;
    EXPECT_EQ(streamed.find(p.stop[0]), std::string::npos) << "stop text was streamed";
    return true;
  });
  EXPECT_EQ(cut.finish_reason, "stop");
  EXPECT_EQ(cut.text, full.text.substr(0, first));
  EXPECT_EQ(streamed, cut.text);
  // Without a stop string the stream adds up to the text as well.
  p.stop.clear();
  streamed.clear();
  GenerationResult again = gen.generate(prompt, p, [&](const TokenEvent& e) {
    streamed += e.delta;
    return true;
  });
  EXPECT_EQ(again.text, full.text);
  EXPECT_EQ(streamed, full.text);
}

TEST_F(CoordinatorTest, ACancelledGenerationStopsAtOnce) {
  gpu::StepRunner runner(*model_);
  Generator gen(runner, *tok_);
  GenerationParams p;
  p.max_tokens = 50;
  int events = 0;
  GenerationResult r = gen.generate({1, 2, 3}, p, [&](const TokenEvent&) { return ++events < 3; });
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_EQ(r.tokens.size(), 3u);  // what the client was given
  GenerationParams too_long;
  too_long.max_tokens = int(gen.context_length());
  EXPECT_THROW(gen.generate({1, 2, 3}, too_long), Error);
}

// Continuous batching: requests running together (different prompt lengths,
// chunked prefill, greedy and seeded sampling, stop strings) each get what
// they get alone, and they did share steps.
TEST_F(CoordinatorTest, ConcurrentRequestsShareStepsAndGetTheirOwnTokens) {
  struct Job {
    std::vector<uint32_t> prompt;
    GenerationParams p;
  };
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i) {
    Job j;
    for (int t = 0; t < 3 + 7 * i; ++t) j.prompt.push_back(uint32_t(1 + (t * 37 + i * 11) % 200));
    j.p.max_tokens = 24 + 4 * i;
    if (i % 2) {
      j.p.sampling.temperature = 0.8f;
      j.p.sampling.seed = uint64_t(100 + i);
    }
    jobs.push_back(j);
  }
  std::vector<GenerationResult> alone;
  {
    gpu::StepRunner runner(*model_);
    Generator gen(runner, *tok_);
    for (const Job& j : jobs) alone.push_back(gen.generate(j.prompt, j.p));
    EXPECT_EQ(gen.stats().max_step_sequences, 1u);
  }
  GeneratorOptions o;
  o.max_step_tokens = 8;  // prompts longer than this prefill in chunks
  o.max_sequences = 4;    // two requests wait for a place
  gpu::StepRunner runner2(*model_);
  Generator gen(runner2, *tok_, o);
  std::vector<GenerationResult> together(jobs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < jobs.size(); ++i)
    threads.emplace_back([&, i] { together[i] = gen.generate(jobs[i].prompt, jobs[i].p); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(together[i].text, alone[i].text) << "request " << i;
    EXPECT_EQ(together[i].finish_reason, alone[i].finish_reason) << "request " << i;
  }
  const GeneratorStats st = gen.stats();
  EXPECT_EQ(st.requests_served, jobs.size());
  EXPECT_GE(st.max_step_sequences, 2u);
  EXPECT_LE(st.max_step_sequences, 4u);
  uint64_t generated = 0;
  for (const auto& r : together) generated += r.tokens.size();
  EXPECT_LT(st.steps, generated);  // shared steps: fewer passes than tokens
  EXPECT_EQ(st.running + st.waiting, 0u);
}

// A gpu worker that loses every sequence at the given steps, as a restarted
// one would: it forgets them all and says it was lost.
class ForgetfulStepper final : public gpu::Stepper {
 public:
  ForgetfulStepper(engine::Model& m, std::vector<int> at, ErrorKind how) : runner_(m), at_(std::move(at)), how_(how) {}
  std::vector<gpu::SampledToken> step(std::span<const gpu::StepItem> items) override {
    if (std::find(at_.begin(), at_.end(), ++steps_) != at_.end()) {
      runner_.clear();
      ++losses;
      fail(how_, "the worker forgot everything (test)");
    }
    return runner_.step(items);
  }
  void release(uint64_t s) override { runner_.release(s); }
  bool wait_ready(std::chrono::steady_clock::time_point) override { return ++waits, true; }
  const ModelConfig& config() const override { return runner_.config(); }
  int losses = 0, waits = 0;

 private:
  gpu::StepRunner runner_;
  std::vector<int> at_;
  int steps_ = 0;
  ErrorKind how_;
};

// Replay after a lost worker: requests (greedy and seeded, prompts in
// chunks) end with exactly the tokens of an undisturbed run.
TEST_F(CoordinatorTest, LostWorkerIsReplayedIntoAndRequestsKeepTheirTokens) {
  std::vector<testing::Job> jobs;
  for (int i = 0; i < 4; ++i) {
    testing::Job& j = jobs.emplace_back();
    for (int t = 0; t < 5 + 9 * i; ++t) j.prompt.push_back(uint32_t(1 + (t * 53 + i * 7) % 200));
    j.params.max_tokens = 20;
    j.params.top_logprobs = 2;
    if (i % 2) {
      j.params.sampling.temperature = 0.9f;
      j.params.sampling.seed = uint64_t(7 + i);
    }
  }
  GeneratorOptions o;
  o.max_step_tokens = 6;
  std::vector<GenerationResult> undisturbed, replayed;
  gpu::StepRunner runner(*model_);
  testing::run_concurrently(runner, *tok_, jobs, o, undisturbed);
  for (ErrorKind how : {ErrorKind::kPeerLost, ErrorKind::kNotFound}) {
    ForgetfulStepper flaky(*model_, {9, 25, 26}, how);  // mid-prefill, mid-decode, mid-replay
    const GeneratorStats st = testing::run_concurrently(flaky, *tok_, jobs, o, replayed);
    EXPECT_EQ(flaky.losses, 3);
    // A lost worker's step is first sent again (the new worker might hold
    // the sequences); this one does not, says kNotFound, and they replay.
    if (how == ErrorKind::kPeerLost) EXPECT_GT(st.recoveries, uint64_t(flaky.losses));
    else EXPECT_EQ(st.recoveries, uint64_t(flaky.losses));
    EXPECT_EQ(flaky.waits, how == ErrorKind::kPeerLost ? flaky.losses : 0);
    testing::expect_same(replayed, undisturbed);
  }
  // A worker that never comes back: the requests fail with kPeerLost.
  struct Gone final : gpu::Stepper {
    explicit Gone(engine::Model& m) : r(m) {}
    std::vector<gpu::SampledToken> step(std::span<const gpu::StepItem>) override {
      fail(ErrorKind::kPeerLost, "gone (test)");
    }
    void release(uint64_t) override {}
    bool wait_ready(std::chrono::steady_clock::time_point) override { return false; }
    const ModelConfig& config() const override { return r.config(); }
    gpu::StepRunner r;
  } gone(*model_);
  Generator gen(gone, *tok_);
  try {
    gen.generate(jobs[0].prompt, jobs[0].params);
    ADD_FAILURE() << "expected kPeerLost";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
  }
}

// A gpu worker killed at the given steps — after computing the step (its
// answer lost) or before — and restarted over the same KV files: the new
// worker adopts every sequence, the coordinator sends the step again, and
// nothing is replayed.
class RestartingStepper final : public gpu::Stepper {
 public:
  RestartingStepper(engine::Model& m, std::string prefix, std::vector<int> at)
      : model_(m), persist_{std::move(prefix), self_process()}, at_(std::move(at)) {
    start();
  }
  std::vector<gpu::SampledToken> step(std::span<const gpu::StepItem> items) override {
    // Sent from position 0 again after a step of it succeeded: a replay.
    for (const auto& it : items) reopened += it.position == 0 && started_.count(it.sequence);
    if (std::find(at_.begin(), at_.end(), ++steps_) != at_.end()) {
      if (restarts % 2 == 0) runner_->step(items);  // computed and committed, never answered
      adopted += runner_->adopted();
      start();
      ++restarts;
      fail(ErrorKind::kPeerLost, "the worker was killed (test)");
    }
    std::vector<gpu::SampledToken> out = runner_->step(items);
    for (const auto& it : items) started_.insert(it.sequence);
    return out;
  }
  void release(uint64_t s) override { runner_->release(s); }
  const ModelConfig& config() const override { return model_.config(); }
  uint64_t total_adopted() const { return adopted + runner_->adopted(); }
  int restarts = 0, reopened = 0;
  uint64_t adopted = 0;

 private:
  void start() {
    runner_ = std::make_unique<gpu::StepRunner>(model_);
    runner_->persist(persist_);
  }
  engine::Model& model_;
  gpu::KvPersistence persist_;
  std::vector<int> at_;
  std::unique_ptr<gpu::StepRunner> runner_;
  std::set<uint64_t> started_;
  int steps_ = 0;
};

TEST_F(CoordinatorTest, ARestartedWorkerAdoptsTheKvFilesAndNothingIsReplayed) {
  std::vector<testing::Job> jobs;
  for (int i = 0; i < 4; ++i) {
    testing::Job& j = jobs.emplace_back();
    for (int t = 0; t < 5 + 9 * i; ++t) j.prompt.push_back(uint32_t(1 + (t * 29 + i * 5) % 200));
    j.params.max_tokens = 16;
    j.params.top_logprobs = 1;
    j.params.sampling.repetition_penalty = 1.3f;  // the history must come back too
    if (i % 2) {
      j.params.sampling.temperature = 0.9f;
      j.params.sampling.seed = uint64_t(3 + i);
    }
  }
  GeneratorOptions o;
  o.max_step_tokens = 6;
  std::vector<GenerationResult> undisturbed, restarted;
  gpu::StepRunner runner(*model_);
  testing::run_concurrently(runner, *tok_, jobs, o, undisturbed);
  const std::string prefix = run_->file("kv-test-");
  RestartingStepper flaky(*model_, prefix, {4, 11, 12, 20});  // mid-prefill, mid-decode, twice in a row
  const GeneratorStats st = testing::run_concurrently(flaky, *tok_, jobs, o, restarted);
  EXPECT_EQ(flaky.restarts, 4);
  EXPECT_EQ(st.recoveries, 4u);
  EXPECT_EQ(flaky.reopened, 0);  // no sequence started again
  EXPECT_GT(flaky.total_adopted(), 0u);
  testing::expect_same(restarted, undisturbed);
  size_t left = 0;  // ended sequences take their files with them
  for (const auto& e : std::filesystem::directory_iterator(run_->path()))
    left += e.path().filename().string().starts_with("kv-test-");
  EXPECT_EQ(left, 0u);
}

// One raw request over a socket; returns the whole answer.
std::string http_exchange(int port, const std::string& raw) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return "connect failed";
  (void)!::write(fd, raw.data(), raw.size());  // no half-close: that would read as "gone"
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

TEST_F(CoordinatorTest, HttpErrorsHaveStatusesAndOpenAiShape) {
  gpu::StepRunner runner(*model_);
  Generator gen(runner, *tok_);
  ApiOptions ao;
  ao.api_key = "k";
  OpenAiApi api(gen, std::nullopt, ao);
  HttpServerOptions ho;
  ho.port = 0;
  ho.max_body_bytes = 1000;
  auto server = HttpServer::listen(ho);
  std::atomic<bool> stop{false};
  std::thread t([&] { server.serve([&](const HttpRequest& r, HttpResponder& o) { api.handle(r, o); }, stop); });
  const int port = server.port();
  auto status = [](const std::string& answer) { return answer.substr(0, answer.find("\r\n")); };
  auto body = [](const std::string& answer) {
    return nlohmann::json::parse(answer.substr(answer.find("\r\n\r\n") + 4));
  };
  EXPECT_EQ(status(http_exchange(port, "GET /health HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
  EXPECT_EQ(status(http_exchange(port, "GET /v1/models HTTP/1.1\r\n\r\n")), "HTTP/1.1 401 Unauthorized");
  const std::string auth = "Authorization: Bearer k\r\n";
  EXPECT_EQ(status(http_exchange(port, "GET /v1/models HTTP/1.1\r\n" + auth + "\r\n")), "HTTP/1.1 200 OK");
  EXPECT_EQ(status(http_exchange(port, "NONSENSE\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  auto nf = http_exchange(port, "GET /v2/x HTTP/1.1\r\n" + auth + "\r\n");
  EXPECT_EQ(status(nf), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(body(nf)["error"]["type"], "not_found_error");
  std::string big(2000, 'x');
  EXPECT_EQ(status(http_exchange(port, "POST /v1/completions HTTP/1.1\r\n" + auth + "Content-Length: 2000\r\n\r\n" + big)),
            "HTTP/1.1 413 Payload Too Large");
  auto post = [&](const std::string& json) {
    return http_exchange(port, "POST /v1/completions HTTP/1.1\r\n" + auth +
                              "Content-Length: " + std::to_string(json.size()) + "\r\n\r\n" + json);
  };
  auto bad = post(R"({"prompt": "hi", "top_p": 3})");
  EXPECT_EQ(status(bad), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(body(bad)["error"]["param"], "top_p");
  EXPECT_EQ(status(post(R"({"prompt": ["a", "b"]})")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status(post(R"({"prompt": "hi", "n": 2})")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status(post(R"({"prompt": [1, 2, 99999]})")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status(http_exchange(port, "POST /v1/chat/completions HTTP/1.1\r\n" + auth +
                                      "Content-Length: 2\r\n\r\n{}")), "HTTP/1.1 400 Bad Request");
  auto ok = post(R"({"prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0, "logprobs": 2, "echo": true})");
  ASSERT_EQ(status(ok), "HTTP/1.1 200 OK") << ok;
  auto j = body(ok);
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>() + 3, j["usage"]["total_tokens"].get<int>());
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), j["usage"]["completion_tokens"].get<size_t>());
  for (const auto& lp : j["choices"][0]["logprobs"]["token_logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
  stop = true;
  t.join();
}

}  // namespace
}  // namespace tandem::coordinator
