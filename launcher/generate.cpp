#include "launcher/generate.h"

#include <algorithm>
#include <charconv>
#include <ostream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/engine/model.h"
#include "kernels/cpu/cpu_isa.h"
#include "common/error.h"
#include "common/model/model_source.h"
#include "common/text/tokenizer.h"
#include "launcher/expert_graph.h"

namespace tandem {

std::vector<uint32_t> parse_token_ids(const std::string& s) {
  std::vector<uint32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ' || s[i] == ',' || s[i] == '\t' || s[i] == '\n') {
      ++i;
      continue;
    }
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
    if (ec != std::errc() || p == s.data() + i)
      fail_invalid("--tokens: '{}' is not a list of token ids (at '{}')", s, s.substr(i, 10));
    ids.push_back(v);
    i = size_t(p - s.data());
  }
  if (ids.empty()) fail_invalid("--tokens: no token ids given");
  return ids;
}

namespace {

nlohmann::json rows(const std::vector<float>& logits, size_t vocab) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t r = 0; r < logits.size() / vocab; ++r)
    out.push_back(std::vector<float>(logits.begin() + long(r * vocab), logits.begin() + long((r + 1) * vocab)));
  return out;
}

}  // namespace

void run_logits(const LogitsOptions& o, std::ostream& out) {
  LoadedModel loaded(o.model, o.engine);
  engine::Model& model = *loaded;
  const size_t vocab = model.config().vocab_size;
  auto cache = model.new_cache(int64_t(o.tokens.size()) + o.greedy + 1);
  std::vector<float> logits = model.forward(o.tokens, cache);
  nlohmann::json j;
  j["logits"] = rows(logits, vocab);
  j["route_margins"] = model.route_margins();
  std::vector<uint32_t> greedy;
  nlohmann::json greedy_logits = nlohmann::json::array();
  std::vector<float> last(logits.end() - long(vocab), logits.end());
  for (int s = 0; s < o.greedy; ++s) {
    uint32_t next = engine::argmax(last);
    greedy.push_back(next);
    last = model.forward(std::span<const uint32_t>(&next, 1), cache);
    greedy_logits.push_back(last);
  }
  j["greedy"] = greedy;
  j["greedy_logits"] = greedy_logits;
  out << j.dump() << "\n";
}

void run_generate(const RunOptions& o, std::ostream& out) {
  LoadedModel loaded(o.model, o.engine);
  engine::Model& model = *loaded;
  const auto& c = model.config();
  std::optional<text::Tokenizer> tok;
  std::vector<uint32_t> prompt = o.tokens;
  if (o.prompt) {
    tok.emplace(text::Tokenizer::load(o.model));
    prompt = tok->encode(*o.prompt);
    if (prompt.empty()) fail_invalid("--prompt: the prompt encodes to no tokens");
  }
  for (uint32_t id : prompt)
    if (id >= c.vocab_size)
      fail_invalid("prompt token {} is outside the model's vocabulary ({} ids)", id, c.vocab_size);
  auto cache = model.new_cache(int64_t(prompt.size()) + o.max_tokens);
  engine::Sampler sampler(o.sampling);
  std::vector<uint32_t> seq = prompt;
  std::vector<float> logits = model.forward(prompt, cache);
  std::vector<uint32_t> generated;
  std::optional<text::StreamDecoder> stream;
  if (tok) stream.emplace(*tok);
  for (int s = 0; s < o.max_tokens; ++s) {
    std::span<const float> last(logits.data() + logits.size() - c.vocab_size, c.vocab_size);
    uint32_t next = sampler.sample(last, seq);
    generated.push_back(next);
    seq.push_back(next);
    const bool eos = std::find(c.eos_tokens.begin(), c.eos_tokens.end(), next) != c.eos_tokens.end();
    if (stream && !eos) out << stream->step(next) << std::flush;
    if (eos) break;
    logits = model.forward(std::span<const uint32_t>(&next, 1), cache);
  }
  if (stream) {
    out << stream->finish() << "\n";
    return;
  }
  nlohmann::json j;
  j["prompt_tokens"] = prompt;
  j["tokens"] = generated;
  out << j.dump() << "\n";
}

}  // namespace tandem
