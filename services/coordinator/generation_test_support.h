// For the coordinator's tests: a generated model with its tokenizer, and
// requests run concurrently through a Generator and compared with another
// run token by token (text and log-probabilities too).
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/engine/model.h"
#include "common/model/model_source.h"
#include "common/shm/run_dir.h"
#include "common/text/tokenizer.h"
#include "services/coordinator/generator.h"
#include "tools/gen_model/gen_model.h"

namespace tandem::coordinator::testing {

// A tiny Q8_0 model of `arch` written into its own run directory.
struct GeneratedModel {
  explicit GeneratedModel(Arch arch) : run(RunDirectory::create()), path(run.file("model.gguf")) {
    genmodel::GenOptions o;
    o.config = genmodel::preset_config(arch, "tiny");
    o.dtype = DType::kQ8_0;
    o.progress = false;
    genmodel::generate(o, path);
    src = ModelSource::open(path);
    model = std::make_unique<engine::Model>(*src);
    tok = std::make_unique<text::Tokenizer>(text::Tokenizer::load(path));
  }
  RunDirectory run;
  std::string path;
  std::unique_ptr<ModelSource> src;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<text::Tokenizer> tok;
};

struct Job {
  std::vector<uint32_t> prompt;
  GenerationParams params;
};

// Every job on its own thread through one Generator over `stepper`.
inline GeneratorStats run_concurrently(gpu::Stepper& stepper, const text::Tokenizer& tok, const std::vector<Job>& jobs,
                                       const GeneratorOptions& options, std::vector<GenerationResult>& out) {
  out.assign(jobs.size(), {});
  Generator gen(stepper, tok, options);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < jobs.size(); ++i)
    threads.emplace_back([&, i] { out[i] = gen.generate(jobs[i].prompt, jobs[i].params); });
  for (auto& t : threads) t.join();
  return gen.stats();
}

inline void expect_same(const std::vector<GenerationResult>& a, const std::vector<GenerationResult>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_EQ(a[i].text, b[i].text) << "request " << i;
    ASSERT_EQ(a[i].events.size(), b[i].events.size()) << "request " << i;
    for (size_t k = 0; k < a[i].events.size(); ++k)
      EXPECT_EQ(a[i].events[k].token.logprob, b[i].events[k].token.logprob) << "request " << i << " token " << k;
  }
}

}  // namespace tandem::coordinator::testing
