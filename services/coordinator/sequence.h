// One request's generation state while the scheduler runs it: its KV cache,
// how much of the prompt is in the cache, its sampler, and the text it has
// produced — stop strings (never streamed partially), end-of-sequence, the
// token limit, log-probabilities and UTF-8-safe deltas. The scheduler
// (generator.h) feeds it one step at a time, batched with other sequences.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/engine/kv_cache.h"
#include "common/engine/model.h"
#include "common/engine/sampler.h"
#include "common/text/tokenizer.h"
#include "services/coordinator/generation.h"

namespace tandem::coordinator {

class Sequence {
 public:
  Sequence(const engine::Model& model, const text::Tokenizer& tok, std::vector<uint32_t> prompt,
           GenerationParams params);

  // The tokens to run next: up to `budget` prompt tokens while prefilling
  // (a long prompt goes in chunks), else the last sampled token.
  std::span<const uint32_t> next_input(int64_t budget) const;
  bool prefilling() const { return fed_ < prompt_len_; }
  engine::KvCache& cache() { return cache_; }
  // After a step ran next_input(): `n` of its tokens are in the cache;
  // `logits` are those of the last one. Once the prompt is in, samples the
  // next token and appends what it shows to `events`; returns true when the
  // generation has finished (result() is then complete).
  bool advance(int64_t n, std::span<const float> logits, std::vector<TokenEvent>& events);
  // Ends the generation early: the client went away.
  void cancel() {
    result_.finish_reason = "cancelled";
    result_.text = text_;
  }
  GenerationResult& result() { return result_; }
  size_t generated() const { return result_.tokens.size(); }

 private:
  bool finish(std::vector<TokenEvent>& events, const char* reason, bool stopped);

  const engine::Model& model_;
  const text::Tokenizer& tok_;
  GenerationParams p_;
  engine::KvCache cache_;
  engine::Sampler sampler_;
  std::vector<uint32_t> seq_;  // prompt, then generated tokens
  size_t prompt_len_, fed_ = 0;
  text::StreamDecoder stream_;
  size_t hold_ = 0;      // bytes held back in case a stop string is starting
  std::string text_;     // everything decoded so far
  size_t shown_ = 0;     // bytes of it already handed out
  GenerationResult result_;
};

}  // namespace tandem::coordinator
