// What a generation request asks for and what it gets back, shared by the
// scheduler (generator.h), the sequences it runs (sequence.h) and the API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/engine/sampler.h"

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

}  // namespace tandem::coordinator
