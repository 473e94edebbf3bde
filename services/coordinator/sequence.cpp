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

}  // namespace

Sequence::Sequence(uint64_t id, const ModelConfig& config, const text::Tokenizer& tok,
                   std::vector<uint32_t> prompt, GenerationParams params)
    : id_(id),
      config_(config),
      tok_(tok),
      p_(std::move(params)),
      seq_(std::move(prompt)),
      prompt_len_(seq_.size()),
      stream_(tok) {
  sp_.capacity = int64_t(prompt_len_) + p_.max_tokens + 1;
  sp_.sampling = p_.sampling;
  sp_.top_logprobs = p_.top_logprobs;
  for (const std::string& s : p_.stop) hold_ = std::max(hold_, s.size());
  hold_ = hold_ > 0 ? hold_ - 1 : 0;
  result_.prompt_tokens = prompt_len_;
  result_.finish_reason = "length";
}

gpu::StepItem Sequence::next_item(int64_t budget) const {
  gpu::StepItem it;
  it.sequence = id_;
  if (replay_ < schedule_.size()) {
    it.position = int64_t(replayed_);
    it.tokens = std::span(seq_).subspan(replayed_, schedule_[replay_]);
  } else if (fed_ < prompt_len_) {
    const size_t n = std::min(prompt_len_ - fed_, size_t(std::max<int64_t>(budget, 1)));
    it.position = int64_t(fed_);
    it.tokens = std::span(seq_).subspan(fed_, n);
    it.sample = fed_ + n == prompt_len_;
  } else {
    it.position = int64_t(fed_);
    it.tokens = std::span(seq_).subspan(fed_, 1);  // the last sampled token
    it.sample = true;
  }
  if (it.position == 0) it.params = &sp_;
  return it;
}

void Sequence::replay() {
  if (schedule_.empty()) return;  // nothing was in the worker's cache
  replay_ = 0;
  replayed_ = 0;
}

bool Sequence::advance(int64_t n, const gpu::SampledToken& sampled, std::vector<TokenEvent>& events) {
  if (replay_ < schedule_.size()) {
    replayed_ += size_t(n);
    if (++replay_ == schedule_.size()) replay_ = SIZE_MAX;
    return false;
  }
  schedule_.push_back(uint32_t(n));
  fed_ += size_t(n);
  if (fed_ < prompt_len_) return false;  // more of the prompt to go
  if (!sampled.sampled) fail(ErrorKind::kInternal, "sequence {}: the step sampled no token", id_);
  const uint32_t next = sampled.token;
  const ModelConfig& c = config_;
  const bool eos = std::find(c.eos_tokens.begin(), c.eos_tokens.end(), next) != c.eos_tokens.end() ||
                   (tok_.info().eos_id && *tok_.info().eos_id == next);
  if (eos) return finish(events, "stop", false);
  result_.tokens.push_back(next);
  seq_.push_back(next);
  TokenEvent ev;
  ev.token.id = next;
  if (p_.top_logprobs >= 0) {
    ev.token.text = token_text(tok_, next);
    ev.token.logprob = sampled.logprob;
    for (const auto& [id, lp] : sampled.top) ev.top.push_back({id, token_text(tok_, id), lp});
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
