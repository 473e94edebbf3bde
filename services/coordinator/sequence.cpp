#include "services/coordinator/sequence.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace tandem::coordinator {
namespace {

// Bytes of `s` that can be shown without splitting a UTF-8 character or
// revealing the start of a stop string (the last `hold` bytes).
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

Sequence::Sequence(const engine::Model& model, const text::Tokenizer& tok, std::vector<uint32_t> prompt,
                   GenerationParams params)
    : model_(model),
      tok_(tok),
      p_(std::move(params)),
      cache_(model.new_cache(int64_t(prompt.size()) + p_.max_tokens + 1)),
      sampler_(p_.sampling),
      seq_(std::move(prompt)),
      prompt_len_(seq_.size()),
      stream_(tok) {
  for (const std::string& s : p_.stop) hold_ = std::max(hold_, s.size());
  hold_ = hold_ > 0 ? hold_ - 1 : 0;
  result_.prompt_tokens = prompt_len_;
  result_.finish_reason = "length";
}

std::span<const uint32_t> Sequence::next_input(int64_t budget) const {
  if (!prefilling()) return std::span(seq_).last(1);
  const size_t n = std::min(prompt_len_ - fed_, size_t(std::max<int64_t>(budget, 1)));
  return std::span(seq_).subspan(fed_, n);
}

bool Sequence::advance(int64_t n, std::span<const float> logits, std::vector<TokenEvent>& events) {
  const ModelConfig& c = model_.config();
  if (prefilling()) {
    fed_ += size_t(n);
    if (prefilling()) return false;  // more of the prompt to go
  }
  const uint32_t next = sampler_.sample(logits, seq_);
  const bool eos = std::find(c.eos_tokens.begin(), c.eos_tokens.end(), next) != c.eos_tokens.end() ||
                   (tok_.info().eos_id && *tok_.info().eos_id == next);
  if (eos) return finish(events, "stop", false);
  result_.tokens.push_back(next);
  seq_.push_back(next);
  TokenEvent ev;
  ev.token.id = next;
  if (p_.top_logprobs >= 0) {
    ev.token.text = token_text(tok_, next);
    log_softmax_top(logits, next, p_.top_logprobs, ev, tok_);
  }
  text_ += stream_.step(next);
  // A stop string can only begin at or after shown_: the held-back bytes
  // cover any that was still incomplete when text was last shown.
  size_t stop_at = std::string::npos;
  for (const std::string& s : p_.stop) stop_at = std::min(stop_at, text_.find(s, shown_));
  const bool stopped = stop_at != std::string::npos;
  if (stopped) text_.resize(stop_at);
  const size_t end = std::max(shown_, stopped ? text_.size() : safe_end(text_, hold_));
  ev.delta = text_.substr(shown_, end - shown_);
  shown_ = end;
  if (p_.top_logprobs >= 0) result_.events.push_back(ev);
  events.push_back(std::move(ev));
  if (stopped) return finish(events, "stop", true);
  if (int(result_.tokens.size()) >= p_.max_tokens) return finish(events, "length", false);
  return false;
}

bool Sequence::finish(std::vector<TokenEvent>& events, const char* reason, bool stopped) {
  result_.finish_reason = reason;
  // What was held back for a stop string that did not come, and any bytes
  // the stream decoder still holds (an incomplete character at the end).
  if (!stopped) text_ += stream_.finish();
  if (shown_ < text_.size()) {
    TokenEvent tail;
    tail.delta = text_.substr(shown_);
    tail.token.id = UINT32_MAX;  // not a token: text held back until the end
    events.push_back(std::move(tail));
    shown_ = text_.size();
  }
  result_.text = text_;
  return true;
}

}  // namespace tandem::coordinator
