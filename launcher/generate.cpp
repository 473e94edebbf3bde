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
#include "launcher/graph_forward.h"

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

// One sequence: through the process graph (the gpu worker process, by
// default for a model with routed experts) or the engine in this process.
class SequenceForward {
 public:
  SequenceForward(const std::string& model, const EngineOptions& o, int64_t capacity) {
    if (!o.single_process && ModelSource::open(model)->config().moe.n_experts > 0) {
      graph_ = std::make_unique<GraphForward>(model, o, capacity);
      return;
    }
    local_ = std::make_unique<LoadedModel>(model, o);
    cache_.emplace((**local_).new_cache(capacity));
  }
  const ModelConfig& config() { return graph_ ? graph_->config() : (**local_).config(); }
  std::vector<float> forward(std::span<const uint32_t> tokens) {
    return graph_ ? graph_->forward(tokens) : (**local_).forward(tokens, *cache_);
  }
  // Per token of the last forward() (the engine in this process only).
  std::optional<std::vector<float>> route_margins() {
    if (graph_) return std::nullopt;
    return (**local_).route_margins();
  }

 private:
  std::unique_ptr<GraphForward> graph_;
  std::unique_ptr<LoadedModel> local_;
  std::optional<engine::KvCache> cache_;
};

}  // namespace

void run_logits(const LogitsOptions& o, std::ostream& out) {
  SequenceForward model(o.model, o.engine, int64_t(o.tokens.size()) + o.greedy + 1);
  const size_t vocab = model.config().vocab_size;
  std::vector<float> logits = model.forward(o.tokens);
  nlohmann::json j;
  j["logits"] = rows(logits, vocab);
  if (auto m = model.route_margins()) j["route_margins"] = *m;
  std::vector<uint32_t> greedy;
  nlohmann::json greedy_logits = nlohmann::json::array();
  std::vector<float> last(logits.end() - long(vocab), logits.end());
  for (int s = 0; s < o.greedy; ++s) {
    uint32_t next = engine::argmax(last);
    greedy.push_back(next);
    last = model.forward(std::span<const uint32_t>(&next, 1));
    greedy_logits.push_back(last);
  }
  j["greedy"] = greedy;
  j["greedy_logits"] = greedy_logits;
  out << j.dump() << "\n";
}

void run_generate(const RunOptions& o, std::ostream& out) {
  std::optional<text::Tokenizer> tok;
  std::vector<uint32_t> prompt = o.tokens;
  if (o.prompt) {
    tok.emplace(text::Tokenizer::load(o.model));
    prompt = tok->encode(*o.prompt);
    if (prompt.empty()) fail_invalid("--prompt: the prompt encodes to no tokens");
  }
  {
    const ModelConfig c = ModelSource::open(o.model)->config();
    for (uint32_t id : prompt)
      if (id >= c.vocab_size)
        fail_invalid("prompt token {} is outside the model's vocabulary ({} ids)", id, c.vocab_size);
  }
  engine::Sampler sampler(o.sampling);
  SequenceForward model(o.model, o.engine, int64_t(prompt.size()) + o.max_tokens);
  const ModelConfig& c = model.config();
  std::vector<uint32_t> seq = prompt;
  std::vector<float> logits = model.forward(prompt);
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
    logits = model.forward(std::span<const uint32_t>(&next, 1));
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
