// Token sampling: greedy, or seeded random with the usual filters.
// Order (as vLLM and Hugging Face): repetition penalty, temperature, top-k,
// top-p, min-p, then a draw from the remaining distribution.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace tandem::engine {

struct SamplingParams {
  float temperature = 0.0f;        // <= 0: greedy (argmax)
  int top_k = 0;                   // 0: off
  float top_p = 1.0f;              // 1: off
  float min_p = 0.0f;              // 0: off; keeps p >= min_p * p_max
  float repetition_penalty = 1.0f; // 1: off; CTRL-style, on tokens seen in history
  int repeat_last_n = 64;          // how much history the penalty looks at (-1: all)
  uint64_t seed = 0;
};

// Validates ranges; throws Error(kInvalidInput) naming the bad parameter.
void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks the next token from one row of logits; history is the sequence so
  // far (prompt and generated tokens) for the repetition penalty. A random
  // draw is a function of (seed, history.size()): the same position of the
  // same seeded request draws the same way however often it is recomputed.
  uint32_t sample(std::span<const float> logits, std::span<const uint32_t> history);

 private:
  SamplingParams p_;
};

// Index of the largest logit (lowest index on ties).
uint32_t argmax(std::span<const float> logits);

}  // namespace tandem::engine
