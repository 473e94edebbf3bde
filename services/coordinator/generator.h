// Text generation for the API: prompt ids in, tokens out one by one through
// the engine (single-process or with its routed experts in expert workers),
// with sampling, stop strings (never streamed partially), end-of-sequence,
// a token limit, log-probabilities, and cancellation when the consumer says
// so. One sequence at a time: requests queue on a mutex (continuous batching
// of decode steps across requests is not built yet).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/engine/model.h"
#include "common/engine/sampler.h"
#include "common/text/tokenizer.h"

namespace tandem::coordinator {

struct GenerationParams {
  int max_tokens = 16;
  engine::SamplingParams sampling;
  std::vector<std::string> stop;
  int top_logprobs = -1;  // -1: no log-probabilities; 0..20: the chosen one plus that many
};

struct TokenLogprob {
  uint32_t id = 0;
  std::string text;
  float logprob = 0;
};

struct TokenEvent {
  std::string delta;  // text to show now (may be empty while a stop string might begin)
  TokenLogprob token;
  std::vector<TokenLogprob> top;
};

struct GenerationResult {
  std::vector<uint32_t> tokens;
  std::string text;
  std::string finish_reason;  // "stop" or "length" (or "cancelled")
  std::vector<TokenEvent> events;  // when log-probabilities were asked for
  size_t prompt_tokens = 0;
};

class Generator {
 public:
  Generator(engine::Model& model, const text::Tokenizer& tokenizer);
  // on_event returns false to cancel (the client went away). Throws
  // tandem::Error(kInvalidInput) for a prompt the context cannot hold.
  GenerationResult generate(const std::vector<uint32_t>& prompt, const GenerationParams& p,
                            const std::function<bool(const TokenEvent&)>& on_event = {});
  // The checks generate() makes before it starts (throws kInvalidInput).
  void check(const std::vector<uint32_t>& prompt, const GenerationParams& p) const;
  const text::Tokenizer& tokenizer() const { return tok_; }
  int64_t context_length() const { return context_; }
  uint64_t requests_served() const { return served_; }

 private:
  engine::Model& model_;
  const text::Tokenizer& tok_;
  int64_t context_;
  std::mutex mu_;
  uint64_t served_ = 0;
};

}  // namespace tandem::coordinator
