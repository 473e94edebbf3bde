#include "services/coordinator/generator.h"

#include <algorithm>
#include <atomic>
#include <exception>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "services/coordinator/sequence.h"

namespace tandem::coordinator {

// A request between its thread (generate) and the scheduler. The scheduler
// owns `seq` until it sets `done`; events pass under `mu`.
struct Generator::Request {
  Request(uint64_t id, const ModelConfig& config, const text::Tokenizer& tok, const std::vector<uint32_t>& prompt,
          const GenerationParams& p)
      : seq(id, config, tok, prompt, p) {}
  Sequence seq;
  std::atomic<bool> cancelled{false};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenEvent> events;  // produced, not yet handed to the client
  bool done = false;
  std::exception_ptr error;

  void deliver(std::vector<TokenEvent>& evs, bool finished, std::exception_ptr e = nullptr) {
    {
      std::lock_guard lk(mu);
      for (TokenEvent& ev : evs) events.push_back(std::move(ev));
      done = finished;
      error = e;
    }
    cv.notify_all();
  }
};

Generator::Generator(gpu::Stepper& stepper, const text::Tokenizer& tokenizer, GeneratorOptions options)
    : stepper_(stepper), tok_(tokenizer), options_(options) {
  if (options_.max_sequences < 1 || options_.max_step_tokens < 1)
    fail_invalid("the scheduler needs at least one sequence and one token per step");
  const uint32_t m = stepper.config().max_positions;
  context_ = m > 0 ? int64_t(m) : 4096;
  scheduler_ = std::thread([this] { run(); });
}

Generator::~Generator() {
  shutdown();
  scheduler_.join();
}

void Generator::shutdown() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
}

GeneratorStats Generator::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void Generator::check(const std::vector<uint32_t>& prompt, const GenerationParams& p) const {
  const ModelConfig& c = stepper_.config();
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
  std::shared_ptr<Request> r;
  {
    std::lock_guard lk(mu_);
    if (stopping_) fail(ErrorKind::kPeerLost, "the server is stopping");
    r = std::make_shared<Request>(next_id_++, stepper_.config(), tok_, prompt, p);
    waiting_.push_back(r);
    stats_.waiting = waiting_.size();
  }
  wake_.notify_all();
  bool cancelled = false;
  size_t seen_tokens = 0;  // token events handed to on_event
  std::string seen_text;
  for (bool done = false; !done;) {
    std::vector<TokenEvent> evs;
    {
      std::unique_lock lk(r->mu);
      r->cv.wait(lk, [&] { return !r->events.empty() || r->done; });
      evs.swap(r->events);
      done = r->done;
    }
    for (const TokenEvent& ev : evs) {
      if (cancelled || !on_event) break;
      seen_tokens += ev.token.id != UINT32_MAX;
      seen_text += ev.delta;
      if (!on_event(ev)) {
        cancelled = true;
        r->cancelled = true;
        wake_.notify_all();
      }
    }
  }
  if (r->error) std::rethrow_exception(r->error);
  GenerationResult result = std::move(r->seq.result());
  if (cancelled) {
    // The scheduler may have run on before it saw the cancellation: the
    // result is what the client was given.
    result.finish_reason = "cancelled";
    result.tokens.resize(std::min(result.tokens.size(), seen_tokens));
    result.events.resize(std::min(result.events.size(), seen_tokens));
    result.text = seen_text;
  }
  return result;
}

void Generator::run() {
  std::vector<std::shared_ptr<Request>> running;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      // Idle: the stepper is called now and then (heartbeats, releases).
      while (!wake_.wait_for(lk, std::chrono::milliseconds(100),
                             [&] { return stopping_ || !waiting_.empty() || !running.empty(); })) {
        lk.unlock();
        try {
          stepper_.idle();
        } catch (const std::exception& e) {
          spdlog::warn("while idle: {}", e.what());
        }
        lk.lock();
      }
      if (stopping_) break;
      while (!waiting_.empty() && int(running.size()) < options_.max_sequences) {
        running.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      stats_.running = running.size();
      stats_.waiting = waiting_.size();
    }
    std::erase_if(running, [this](const std::shared_ptr<Request>& r) {
      if (!r->cancelled) return false;
      r->seq.cancel();
      end(*r);
      std::vector<TokenEvent> none;
      r->deliver(none, true);
      return true;
    });
    if (!running.empty()) step(running);
  }
  // Stopping: whoever still waits gets an error instead of a hang.
  auto e = std::make_exception_ptr(Error(ErrorKind::kPeerLost, "the server stopped before the request finished"));
  std::vector<TokenEvent> none;
  for (auto& r : running) r->deliver(none, true, e);
  std::lock_guard lk(mu_);
  for (auto& r : waiting_) r->deliver(none, true, e);
  waiting_.clear();
}

void Generator::end(Request& r) {
  try {
    stepper_.release(r.seq.id());
  } catch (const std::exception& e) {
    spdlog::warn("releasing sequence {}: {}", r.seq.id(), e.what());
  }
}

bool Generator::recover(std::vector<std::shared_ptr<Request>>& running, const std::exception& why) {
  {
    std::lock_guard lk(mu_);
    ++stats_.recoveries;
  }
  const auto* e = dynamic_cast<const Error*>(&why);
  // A kNotFound answering the retry of a lost worker's step (the new worker
  // could not adopt the sequences) is the same loss, not another one.
  const bool same_loss = retrying_ && e && e->kind() == ErrorKind::kNotFound;
  retrying_ = false;
  if (!same_loss && ++failed_steps_ > options_.max_recoveries) {
    spdlog::error("giving up after {} replays without progress: {}", options_.max_recoveries, why.what());
    failed_steps_ = 0;  // the next requests get their own tries
    return false;
  }
  if (e && e->kind() == ErrorKind::kPeerLost) {
    spdlog::warn("the gpu worker was lost ({}); waiting for it to come back", why.what());
    const auto deadline = std::chrono::steady_clock::now() + options_.recovery_timeout;
    while (!stepper_.wait_ready(std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(200)))) {
      bool stopping = false;
      {
        std::lock_guard lk(mu_);
        stopping = stopping_;
      }
      if (stopping || std::chrono::steady_clock::now() >= deadline) {
        if (!stopping) spdlog::error("no gpu worker came back within {} ms", options_.recovery_timeout.count());
        failed_steps_ = 0;
        return false;
      }
    }
  }
  if (e && e->kind() == ErrorKind::kPeerLost) {
    // The new worker may hold the sequences already (adopted from the lost
    // one's KV files): the step is sent again as it was; if it does not, it
    // says kNotFound and they are replayed.
    spdlog::warn("sending the step again to the new gpu worker ({} running sequence(s))", running.size());
    retrying_ = true;
    return true;
  }
  spdlog::warn("replaying {} running sequence(s) into the gpu worker", running.size());
  for (auto& r : running) r->seq.replay();
  return true;
}

void Generator::step(std::vector<std::shared_ptr<Request>>& running) {
  // Decoding sequences first (one token each), then prompt chunks (and
  // replays) in arrival order while the step's token budget lasts.
  std::vector<Request*> members;
  std::vector<gpu::StepItem> batch;
  int64_t budget = options_.max_step_tokens;
  for (auto& r : running)
    if (!r->seq.prefilling()) {
      members.push_back(r.get());
      batch.push_back(r->seq.next_item(1));
      --budget;
    }
  for (auto& r : running)
    if (r->seq.prefilling() && (budget > 0 || batch.empty())) {
      members.push_back(r.get());
      batch.push_back(r->seq.next_item(budget));
      budget -= int64_t(batch.back().tokens.size());
    }
  std::vector<gpu::SampledToken> sampled;
  try {
    sampled = stepper_.step(batch);
    failed_steps_ = 0;
    retrying_ = false;
  } catch (const std::exception& ex) {
    const auto* e = dynamic_cast<const Error*>(&ex);
    const bool lost = e && (e->kind() == ErrorKind::kPeerLost || e->kind() == ErrorKind::kNotFound);
    if (lost && recover(running, ex)) return;
    retrying_ = false;
    spdlog::error("a step of {} sequences failed: {}", batch.size(), ex.what());
    auto err = std::current_exception();
    std::vector<TokenEvent> none;
    // After a lost worker every running sequence fails, else the step's.
    for (auto& r : running)
      if (lost || std::find(members.begin(), members.end(), r.get()) != members.end()) {
        end(*r);
        r->deliver(none, true, err);
      }
    std::erase_if(running, [&](const auto& r) {
      return lost || std::find(members.begin(), members.end(), r.get()) != members.end();
    });
    return;
  }
  struct Outcome {
    std::vector<TokenEvent> events;
    bool end = false;
    std::exception_ptr error;
  };
  std::vector<Outcome> out(members.size());
  uint64_t tokens = 0, ended = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    tokens += batch[i].tokens.size();
    try {
      out[i].end = members[i]->seq.advance(int64_t(batch[i].tokens.size()), sampled.at(i), out[i].events);
    } catch (const std::exception&) {
      out[i].end = true;
      out[i].error = std::current_exception();
    }
    if (out[i].end) end(*members[i]);
    ended += out[i].end;
  }
  std::erase_if(running, [&](const auto& r) {
    const auto it = std::find(members.begin(), members.end(), r.get());
    return it != members.end() && out[size_t(it - members.begin())].end;
  });
  {
    // Counted before the requests hear of it: a caller that has its result
    // sees it in stats().
    std::lock_guard lk(mu_);
    ++stats_.steps;
    stats_.step_tokens += tokens;
    stats_.step_sequences += members.size();
    stats_.max_step_sequences = std::max<uint64_t>(stats_.max_step_sequences, members.size());
    stats_.requests_served += ended;
    stats_.running = running.size();
  }
  for (size_t i = 0; i < members.size(); ++i)
    if (!out[i].events.empty() || out[i].end) members[i]->deliver(out[i].events, out[i].end, out[i].error);
}

}  // namespace tandem::coordinator
