// Text generation for the API with continuous batching: every request thread
// hands its prompt to one scheduler thread, which runs all admitted sequences
// together — each step feeds every decoding sequence its last token and
// prefilling ones a chunk of their prompt — on a gpu::Stepper (the gpu worker
// process, or a StepRunner in this one), which samples each, and hands the
// tokens back. When the gpu worker dies, the scheduler waits for its
// successor and replays every running sequence into it (step.h), so the
// requests go on with the tokens they would have had. A request joins the next step after it
// arrives and leaves the batch when it finishes, so a long generation never
// holds up a short one and decode steps are shared across requests. A row's
// numbers do not depend on the rest of its batch (model.h), so a request gets
// the same tokens alone or in company.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/text/tokenizer.h"
#include "services/coordinator/generation.h"
#include "services/gpu_worker/step.h"

namespace tandem::coordinator {

struct GeneratorOptions {
  int max_sequences = 16;         // sequences in one step; more requests wait
  int64_t max_step_tokens = 512;  // tokens in one step; longer prompts prefill in chunks
  // How long running requests wait for a lost gpu worker to come back.
  std::chrono::milliseconds recovery_timeout{60000};
  // Replays in a row without one step succeeding before requests fail.
  int max_recoveries = 8;
};

struct GeneratorStats {
  uint64_t requests_served = 0;
  uint64_t steps = 0;              // forward passes
  uint64_t step_tokens = 0;        // tokens over all steps
  uint64_t step_sequences = 0;     // sequences over all steps (÷ steps: mean batch)
  uint64_t max_step_sequences = 0; // the largest batch so far
  uint64_t running = 0, waiting = 0;
  uint64_t recoveries = 0;         // times running sequences were replayed into a worker
};

class Generator {
 public:
  Generator(gpu::Stepper& stepper, const text::Tokenizer& tokenizer, GeneratorOptions options = {});
  ~Generator();  // requests still running end with an error
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Blocks until the generation ends; any number of threads may call it at
  // once. on_event (called on this thread) returns false to cancel (the
  // client went away). Throws tandem::Error(kInvalidInput) for bad
  // parameters or a prompt the context cannot hold, and the engine's error
  // if a step fails.
  GenerationResult generate(const std::vector<uint32_t>& prompt, const GenerationParams& p,
                            const std::function<bool(const TokenEvent&)>& on_event = {});
  // The checks generate() makes before it queues (throws kInvalidInput).
  void check(const std::vector<uint32_t>& prompt, const GenerationParams& p) const;
  const text::Tokenizer& tokenizer() const { return tok_; }
  int64_t context_length() const { return context_; }
  uint64_t requests_served() const { return stats().requests_served; }
  GeneratorStats stats() const;
  // Ends every request (running ones with an error) and takes no more;
  // the destructor does the same.
  void shutdown();

 private:
  struct Request;
  void run();
  void step(std::vector<std::shared_ptr<Request>>& running);
  // After a step failed because the worker lost its sequences: replays them
  // all (waiting for a lost worker first); false when requests must fail.
  bool recover(std::vector<std::shared_ptr<Request>>& running, const std::exception& why);
  void end(Request& r);  // releases its sequence at the worker

  gpu::Stepper& stepper_;
  uint64_t next_id_ = 1;
  int failed_steps_ = 0;  // consecutive recoveries without a successful step
  bool retrying_ = false;  // the last step failed with kPeerLost and is being sent again
  const text::Tokenizer& tok_;
  GeneratorOptions options_;
  int64_t context_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Request>> waiting_;
  bool stopping_ = false;
  GeneratorStats stats_;
  std::thread scheduler_;
};

}  // namespace tandem::coordinator
