// `tandem logits` and `tandem run`: the single-process engine on a model.
// (The runtime issue adds a multi-process mode to the same commands.)
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/engine/sampler.h"
#include "launcher/expert_graph.h"

namespace tandem {

struct LogitsOptions {
  std::string model;
  EngineOptions engine;
  std::vector<uint32_t> tokens;
  int greedy = 0;  // greedy steps after the prompt
};

// Prints {"logits": [[...] per prompt position], "greedy": [...],
// "greedy_logits": [[...] per step]} as JSON.
void run_logits(const LogitsOptions& o, std::ostream& out);

struct RunOptions {
  std::string model;
  EngineOptions engine;
  std::vector<uint32_t> tokens;       // the prompt as token ids, or
  std::optional<std::string> prompt;  // the prompt as text (model's tokenizer)
  int max_tokens = 32;
  engine::SamplingParams sampling;
};

// Generates up to max_tokens, stopping at an end-of-sequence token. With a
// text prompt, streams the generated text to out as it is produced; with
// token ids, prints {"prompt_tokens": [...], "tokens": [...]} as JSON.
void run_generate(const RunOptions& o, std::ostream& out);

// "1 2 3" or "1,2,3" -> ids; throws Error on anything else.
std::vector<uint32_t> parse_token_ids(const std::string& s);

}  // namespace tandem
