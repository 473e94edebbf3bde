// A prefill worker and a decode worker (two StepRunners) behind one
// SplitStepper: concurrent requests get exactly the tokens and
// log-probabilities of one worker doing both; each sequence is handed over
// once, after its prompt; either worker losing its sequences is replayed
// exactly; no transfer file is left behind.
#include "services/coordinator/split_stepper.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/engine/model.h"
#include "common/error.h"
#include "common/model/model_source.h"
#include "common/shm/run_dir.h"
#include "common/text/tokenizer.h"
#include "services/coordinator/generation_test_support.h"
#include "services/coordinator/generator.h"
#include "services/gpu_worker/step_runner.h"
#include "tools/gen_model/gen_model.h"

namespace tandem::coordinator {
namespace {

// A StepRunner that records what it was sent and, at the given steps,
// forgets every sequence and fails as a restarted worker would.
class Worker final : public gpu::TransferStepper {
 public:
  Worker(engine::Model& m, std::vector<int> forget_at = {}, ErrorKind how = ErrorKind::kPeerLost)
      : runner_(m), forget_at_(std::move(forget_at)), how_(how) {}
  void begin(gpu::StepCall call) override {
    for (const gpu::StepItem& it : call.items) items.push_back({it.sequence, it.position, int64_t(it.tokens.size())});
    imports += call.imports.size();
    exports += call.exports.size();
    runner_.begin(std::move(call));
  }
  std::vector<gpu::SampledToken> finish() override {
    if (std::find(forget_at_.begin(), forget_at_.end(), ++steps_) != forget_at_.end()) {
      runner_.begin({});
      runner_.clear();
      ++losses;
      fail(how_, "the worker forgot everything (test)");
    }
    return runner_.finish();
  }
  void release(uint64_t s) override { runner_.release(s); }
  const ModelConfig& config() const override { return runner_.config(); }
  size_t open() const { return runner_.open_sequences(); }

  struct Item {
    uint64_t sequence;
    int64_t position, tokens;
  };
  std::vector<Item> items;
  size_t imports = 0, exports = 0;
  int losses = 0;

 private:
  gpu::StepRunner runner_;
  std::vector<int> forget_at_;
  int steps_ = 0;
  ErrorKind how_;
};

class SplitStepperTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_ = new testing::GeneratedModel(Arch::kDeepseekV3);  // MLA: the latent cache moves
    run_ = &g_->run;
    model_ = g_->model.get();
    tok_ = g_->tok.get();
  }
  static void TearDownTestSuite() { delete g_; }
  // Six requests at once: prompts of 3..38 tokens in chunks of 8, greedy
  // and seeded, with log-probabilities.
  static std::vector<GenerationResult> run_all(gpu::Stepper& st) {
    std::vector<testing::Job> jobs(6);
    for (size_t i = 0; i < jobs.size(); ++i) {
      for (size_t t = 0; t < 3 + 7 * i; ++t) jobs[i].prompt.push_back(uint32_t(1 + (t * 41 + i * 13) % 200));
      GenerationParams& p = jobs[i].params;
      p.max_tokens = int(12 + 3 * i);
      p.top_logprobs = 2;
      if (i % 2) {
        p.sampling.temperature = 0.9f;
        p.sampling.seed = 50 + i;
      }
    }
    GeneratorOptions o;
    o.max_step_tokens = 8;
    std::vector<GenerationResult> out;
    testing::run_concurrently(st, *tok_, jobs, o, out);
    return out;
  }
  static size_t transfer_files() {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(run_->path())) n += e.path().extension() == ".kv";
    return n;
  }
  static inline testing::GeneratedModel* g_ = nullptr;
  static inline RunDirectory* run_ = nullptr;
  static inline engine::Model* model_ = nullptr;
  static inline text::Tokenizer* tok_ = nullptr;
};

TEST_F(SplitStepperTest, MatchesOneWorkerAndHandsEachPromptOverOnce) {
  gpu::StepRunner both(*model_);
  const std::vector<GenerationResult> alone = run_all(both);
  Worker prefill(*model_), decode(*model_);
  std::vector<GenerationResult> split;
  // A transfer file a killed coordinator left is removed at start.
  { std::ofstream(run_->file("sequence-1-7.0.kv")) << "stale"; }
  ASSERT_EQ(transfer_files(), 1u);
  {
    SplitStepper st(prefill, decode, run_->path());
    EXPECT_EQ(transfer_files(), 0u);
    split = run_all(st);
    EXPECT_EQ(st.handoffs(), alone.size());
  }
  testing::expect_same(split, alone);
  EXPECT_EQ(prefill.exports, alone.size());
  EXPECT_EQ(decode.imports, alone.size());
  // The decode worker got one token at a time, after a prompt; the prefill
  // worker only prompts (every prompt token once), and keeps nothing.
  size_t prompt_tokens = 0;
  for (size_t i = 0; i < alone.size(); ++i) prompt_tokens += 3 + 7 * i;
  int64_t prefilled = 0;
  for (const auto& it : prefill.items) prefilled += it.tokens;
  EXPECT_EQ(size_t(prefilled), prompt_tokens);
  for (const auto& it : decode.items) {
    EXPECT_EQ(it.tokens, 1);
    EXPECT_GE(it.position, 3);
  }
  EXPECT_EQ(prefill.open(), 0u);
  EXPECT_EQ(decode.open(), 0u);
  EXPECT_EQ(transfer_files(), 0u);
}

TEST_F(SplitStepperTest, EitherWorkerLosingItsSequencesIsReplayedExactly) {
  gpu::StepRunner both(*model_);
  const std::vector<GenerationResult> alone = run_all(both);
  for (ErrorKind how : {ErrorKind::kPeerLost, ErrorKind::kNotFound}) {
    // Mid-prefill and mid-replay on the prefill worker; mid-decode (with
    // imports pending) on the decode worker.
    Worker prefill(*model_, {3, 9}, how), decode(*model_, {6, 20}, how);
    std::vector<GenerationResult> split;
    {
      SplitStepper st(prefill, decode, run_->path());
      split = run_all(st);
    }
    EXPECT_EQ(prefill.losses, 2);
    EXPECT_EQ(decode.losses, 2);
    testing::expect_same(split, alone);
    EXPECT_EQ(transfer_files(), 0u);
  }
}

}  // namespace
}  // namespace tandem::coordinator
