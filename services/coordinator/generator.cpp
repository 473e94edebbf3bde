#include "services/coordinator/generator.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace tandem::coordinator {

Generator::Generator(engine::Model& model, const text::Tokenizer& tokenizer)
    : model_(model), tok_(tokenizer) {
  const uint32_t m = model.config().max_positions;
  context_ = m > 0 ? int64_t(m) : 4096;
}

namespace {

// Bytes of `s` from `from` that can be shown without splitting a UTF-8
// character or revealing the start of a stop string.
size_t safe_end(const std::string& s, size_t hold) {
  if (s.size() <= hold) return 0;
  size_t end = s.size() - hold;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return end;
}

// The text of one token for log-probabilities; ids past the tokenizer's
// vocabulary (models pad theirs) have none.
std::string token_text(const text::Tokenizer& tok, uint32_t id) {
  try {
    return tok.decode(std::span(&id, 1));
  } catch (const Error&) {
    return {};
  }
}

void log_softmax_top(std::span<const float> logits, uint32_t chosen, int top, TokenEvent& ev,
                     const text::Tokenizer& tok) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v - mx));
  const float lse = mx + float(std::log(sum));
  ev.token.logprob = logits[chosen] - lse;
  if (top <= 0) return;
  std::vector<uint32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = uint32_t(i);
  const size_t k = std::min(idx.size(), size_t(top));
  std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(),
                    [&](uint32_t a, uint32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t i = 0; i < k; ++i) {
    const uint32_t id = idx[i];
    ev.top.push_back({id, token_text(tok, id), logits[id] - lse});
  }
}

}  // namespace

void Generator::check(const std::vector<uint32_t>& prompt, const GenerationParams& p) const {
  const ModelConfig& c = model_.config();
  if (prompt.empty()) fail_invalid("the prompt is empty");
  if (p.max_tokens < 1) fail_invalid("max_tokens must be at least 1");
  for (uint32_t id : prompt)
    if (id >= c.vocab_size) fail_invalid("prompt token {} is outside the vocabulary ({} ids)", id, c.vocab_size);
  if (int64_t(prompt.size()) + p.max_tokens > context_)
    fail_invalid("the prompt ({} tokens) plus max_tokens ({}) exceeds the context length ({})",
                 prompt.size(), p.max_tokens, context_);
  engine::validate(p.sampling);
}

GenerationResult Generator::generate(const std::vector<uint32_t>& prompt, const GenerationParams& p,
                                     const std::function<bool(const TokenEvent&)>& on_event) {
  check(prompt, p);
  const ModelConfig& c = model_.config();
  std::lock_guard lock(mu_);
  GenerationResult r;
  r.prompt_tokens = prompt.size();
  auto cache = model_.new_cache(int64_t(prompt.size()) + p.max_tokens + 1);
  engine::Sampler sampler(p.sampling);
  std::vector<uint32_t> seq = prompt;
  std::vector<float> logits = model_.forward(prompt, cache);
  text::StreamDecoder stream(tok_);
  size_t hold = 0;
  for (const std::string& s : p.stop) hold = std::max(hold, s.size());
  hold = hold > 0 ? hold - 1 : 0;
  std::string text;       // everything decoded so far
  size_t shown = 0;       // bytes of it already handed out
  r.finish_reason = "length";
  bool hit_stop = false;
  for (int step = 0; step < p.max_tokens; ++step) {
    std::span<const float> last(logits.data() + logits.size() - c.vocab_size, c.vocab_size);
    const uint32_t next = sampler.sample(last, seq);
    const bool eos = std::find(c.eos_tokens.begin(), c.eos_tokens.end(), next) != c.eos_tokens.end() ||
                     (tok_.info().eos_id && *tok_.info().eos_id == next);
    if (eos) {
      r.finish_reason = "stop";
      break;
    }
    r.tokens.push_back(next);
    seq.push_back(next);
    TokenEvent ev;
    ev.token.id = next;
    if (p.top_logprobs >= 0) {
      ev.token.text = token_text(tok_, next);
      log_softmax_top(last, next, p.top_logprobs, ev, tok_);
    }
    text += stream.step(next);
    // A stop string can only begin at or after `shown`: the held-back bytes
    // cover any that was still incomplete when text was last shown.
    size_t stop_at = std::string::npos;
    for (const std::string& s : p.stop) stop_at = std::min(stop_at, text.find(s, shown));
    const bool stopped = stop_at != std::string::npos;
    if (stopped) text.resize(stop_at);
    const size_t end = std::max(shown, stopped ? text.size() : safe_end(text, hold));
    ev.delta = text.substr(shown, end - shown);
    shown = end;
    if (p.top_logprobs >= 0) r.events.push_back(ev);
    if (on_event && !on_event(ev)) {
      r.finish_reason = "cancelled";
      break;
    }
    if (stopped) {
      r.finish_reason = "stop";
      hit_stop = true;
      break;
    }
    if (step + 1 < p.max_tokens) logits = model_.forward(std::span(&next, 1), cache);
  }
  if (r.finish_reason != "cancelled") {
    // What was held back for a stop string that did not come, and any bytes
    // the stream decoder still holds (an incomplete character at the end).
    if (!hit_stop) text += stream.finish();
    if (shown < text.size() && on_event) {
      TokenEvent tail;
      tail.delta = text.substr(shown);
      tail.token.id = UINT32_MAX;  // not a token: text held back until the end
      on_event(tail);
    }
  }
  r.text = text;
  ++served_;
  return r;
}

}  // namespace tandem::coordinator
