// One request's generation state while the scheduler runs it: its tokens,
// how many of them the gpu worker holds in its KV cache, the chunks they went
// in (to replay them exactly after a worker restart: step.h), and the text it
// has produced — stop strings (never streamed partially), end-of-sequence,
// the token limit, log-probabilities and UTF-8-safe deltas. The scheduler
// (generator.h) feeds it one step at a time, batched with other sequences;
// the cache and the sampler live with the worker (gpu::StepRunner).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/model/config.h"
#include "common/text/tokenizer.h"
#include "services/coordinator/generation.h"
#include "services/gpu_worker/step.h"

namespace tandem::coordinator {

class Sequence {
 public:
  Sequence(uint64_t id, const ModelConfig& config, const text::Tokenizer& tok, std::vector<uint32_t> prompt,
           GenerationParams params);

  // The step item to run next: up to `budget` prompt tokens while
  // prefilling (a long prompt goes in chunks), the last sampled token while
  // decoding, or, while replaying, the next chunk as it was first sent.
  gpu::StepItem next_item(int64_t budget) const;
  // Prefilling or replaying: the item may take more than one token.
  bool prefilling() const { return fed_ < prompt_len_ || replay_ < schedule_.size(); }
  // After a step ran next_item(): its `n` tokens are in the worker's cache;
  // `sampled` is the token after them when the item asked for one. A new
  // token's text goes to `events`; returns true when the generation has
  // finished (result() is then complete).
  bool advance(int64_t n, const gpu::SampledToken& sampled, std::vector<TokenEvent>& events);
  // The worker lost this sequence's cache: start again from position 0 with
  // the same chunks (no text is shown twice).
  void replay();
  uint64_t id() const { return id_; }
  // Ends the generation early: the client went away.
  void cancel() {
    result_.finish_reason = "cancelled";
    result_.text = text_;
  }
  GenerationResult& result() { return result_; }
  size_t generated() const { return result_.tokens.size(); }

 private:
  bool finish(std::vector<TokenEvent>& events, const char* reason, bool stopped);

  uint64_t id_;
  const ModelConfig& config_;
  const text::Tokenizer& tok_;
  GenerationParams p_;
  gpu::SequenceParams sp_;
  std::vector<uint32_t> seq_;  // prompt, then generated tokens
  size_t prompt_len_;
  size_t fed_ = 0;               // tokens of seq_ the worker holds
  std::vector<uint32_t> schedule_;  // the size of every chunk sent, in order
  size_t replay_ = SIZE_MAX;        // while replaying: the next chunk of schedule_
  size_t replayed_ = 0;             // while replaying: tokens of seq_ the worker holds again
  text::StreamDecoder stream_;
  size_t hold_ = 0;      // bytes held back in case a stop string is starting
  std::string text_;     // everything decoded so far
  size_t shown_ = 0;     // bytes of it already handed out
  GenerationResult result_;
};

}  // namespace tandem::coordinator
