#include "services/gpu_worker/remote_experts.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "services/expert_worker/work_message.h"

namespace tandem::gpu {

using namespace std::chrono;

RemoteExperts::RemoteExperts(const std::vector<ExpertLinkPaths>& links, RemoteExpertsOptions options)
    : options_(options) {
  if (links.empty()) fail_invalid("no expert workers to send routed experts to");
  int w = 0;
  for (const ExpertLinkPaths& p : links)
    links_.push_back({RingWriter::attach(p.requests, options_.ring),
                      RingReader::attach(p.responses, options_.ring), w++});
  // A restarted requester finds its predecessor's answers in the response
  // rings: its ids start above any the predecessor used, so they are skipped.
  next_id_ = start_id_ = (uint64_t(epoch()) << 40) + 1;
}

uint32_t RemoteExperts::epoch() const {
  uint32_t e = 0;
  for (const Link& l : links_) e = std::max(e, l.to.epoch());
  return e;
}

RemoteExperts::~RemoteExperts() = default;

void RemoteExperts::wait_ready(Deadline deadline, const std::function<void()>& check) {
  for (Link& l : links_) {
    for (;;) {
      try {
        RingMessage m = l.from.peek(std::min(deadline, deadline_in(milliseconds(100))));
        expert::ResultView r = expert::decode_result(m.bytes);
        if (r.header.kind != expert::ResultKind::kReady)
          fail(ErrorKind::kInternal, "expert worker {} sent {} before it was ready", l.worker,
               uint32_t(r.header.kind));
        spdlog::info("expert worker {} (pid {}) ready: F[{}, {}), {}", l.worker, r.header.pid,
                     r.header.ffn_begin, r.header.ffn_end, r.text);
        l.from.release();
        l.ready_at = steady_clock::now();
        break;
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kTimeout) fail(e.kind(), "expert worker {}: {}", l.worker, e.what());
        if (check) check();
        if (steady_clock::now() >= deadline)
          fail(ErrorKind::kTimeout, "expert worker {} did not become ready in time", l.worker);
      }
    }
  }
}

void RemoteExperts::start(const engine::RoutedWork& work) {
  if (active_) fail(ErrorKind::kInternal, "RemoteExperts::start while a batch is in flight");
  if (broken_)
    fail(ErrorKind::kPeerLost, "the expert workers' rings are out of step after an earlier failure: {}",
         broken_reason_);
  if (tokens_per_message_ == 0) {
    for (Link& l : links_) {
      int64_t t = expert::tokens_per_slot(l.to.shape().slot_bytes, l.from.shape().slot_bytes,
                                          work.hidden, work.top_k);
      tokens_per_message_ = tokens_per_message_ == 0 ? t : std::min(tokens_per_message_, t);
    }
    if (tokens_per_message_ < 1)
      fail(ErrorKind::kInvalidInput, "the expert rings' slots cannot carry one token of hidden size {}",
           work.hidden);
  }
  work_ = work;
  active_ = true;
  n_chunks_ = size_t((work.n_tokens + tokens_per_message_ - 1) / tokens_per_message_);
  sent_ = 0;
  first_id_ = next_id_;
  // Fill the rings (each has slot_count slots); finish() sends the rest.
  const size_t window = links_.front().to.shape().slot_count;
  while (sent_ < n_chunks_ && sent_ < window) send_chunk(sent_++);
}

void RemoteExperts::send_chunk(size_t chunk) {
  const int64_t t0 = int64_t(chunk) * tokens_per_message_;
  const int64_t n = std::min(tokens_per_message_, work_.n_tokens - t0);
  expert::WorkHeader h;
  h.id = first_id_ + chunk;
  h.layer = int32_t(work_.layer);
  h.n_tokens = int32_t(n);
  h.top_k = work_.top_k;
  h.hidden = int32_t(work_.hidden);
  for (Link& l : links_) {
    std::span<std::byte> slot;
    for (;;) {
      try {
        slot = l.to.reserve(deadline_in(options_.reply_timeout));
        break;
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kPeerLost)
          fail(e.kind(), "expert worker {}: cannot send layer {} work: {}", l.worker, work_.layer,
               e.what());
        recover(l, e);  // nothing was written: try again
      }
    }
    l.to.publish(expert::encode_work(slot, h, work_.x + t0 * work_.hidden,
                                     work_.expert_ids + t0 * work_.top_k,
                                     work_.expert_weights + t0 * work_.top_k));
  }
  next_id_ = std::max(next_id_, h.id + 1);
}

void RemoteExperts::receive(size_t chunk, Link& l, bool first) {
  const int64_t t0 = int64_t(chunk) * tokens_per_message_;
  const int64_t n = std::min(tokens_per_message_, work_.n_tokens - t0);
  const uint64_t want = first_id_ + chunk;
  for (;;) {
    RingMessage m;
    try {
      m = l.from.peek(deadline_in(options_.reply_timeout));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kPeerLost)
        fail(e.kind(), "expert worker {}: no answer to layer {} (request {}): {}", l.worker,
             work_.layer, want, e.what());
      recover(l, e);
      continue;
    }
    expert::ResultView r = expert::decode_result(m.bytes);
    if (r.header.kind == expert::ResultKind::kReady) {  // a restarted worker
      spdlog::info("expert worker {} (pid {}) serving: {}", l.worker, r.header.pid, r.text);
      l.attach_deadline = Deadline{};
      l.ready_at = steady_clock::now();
      l.from.release();
      continue;
    }
    if (r.header.kind == expert::ResultKind::kError && r.header.id >= first_id_) {
      std::string text(r.text);
      l.from.release();
      fail(ErrorKind::kInternal, "expert worker {} failed layer {} (request {}): {}", l.worker,
           work_.layer, r.header.id, text);
    }
    if (r.header.id < want) {  // answered twice across a restart, or an earlier batch's
      l.from.release();
      continue;
    }
    if (r.header.kind != expert::ResultKind::kResult || r.header.id != want ||
        r.header.n_tokens != n || r.header.hidden != work_.hidden)
      fail(ErrorKind::kInternal,
           "expert worker {} answered request {} ({} tokens) while {} ({} tokens) was expected",
           l.worker, r.header.id, r.header.n_tokens, want, n);
    float* y = work_.y + t0 * work_.hidden;
    const size_t count = size_t(n * work_.hidden);
    if (first) {
      std::memcpy(y, r.y, count * sizeof(float));
    } else {
      for (size_t i = 0; i < count; ++i) y[i] += r.y[i];
    }
    l.from.release();
    return;
  }
}

void RemoteExperts::recover(Link& l, const Error& e) {
  if (!options_.restart) fail(ErrorKind::kPeerLost, "expert worker {}: {}", l.worker, e.what());
  const auto now = steady_clock::now();
  if (options_.restart(l.worker)) {
    if (++l.restarts > options_.max_restarts)
      fail(ErrorKind::kPeerLost, "expert worker {}: {} (given up after {} restarts)", l.worker,
           e.what(), options_.max_restarts);
    spdlog::warn("expert worker {}: {}; restarted it", l.worker, e.what());
    l.attach_deadline = now + options_.reply_timeout;
    return;
  }
  // The process runs: a restarted worker still attaching, or the one-time
  // notice that a new one has replaced the dead one.
  if (l.attach_deadline == Deadline{}) l.attach_deadline = now + options_.reply_timeout;
  if (now > l.attach_deadline)
    fail(ErrorKind::kTimeout, "expert worker {} was restarted but has not attached its rings in {} ms: {}",
         l.worker, options_.reply_timeout.count(), e.what());
  std::this_thread::sleep_for(milliseconds(1));
}

int RemoteExperts::restarts() const {
  int n = 0;
  for (const Link& l : links_) n += l.restarts;
  return n;
}

void RemoteExperts::finish() {
  if (!active_) fail(ErrorKind::kInternal, "RemoteExperts::finish without start");
  active_ = false;  // whatever happens below, the batch is over
  try {
    for (size_t c = 0; c < n_chunks_; ++c) {
      for (size_t w = 0; w < links_.size(); ++w) receive(c, links_[w], w == 0);
      if (sent_ < n_chunks_) send_chunk(sent_++);
    }
  } catch (const Error& e) {
    // Other workers' answers to this batch may still be queued: later
    // batches would read them, so this object refuses further work.
    broken_ = true;
    broken_reason_ = e.what();
    throw;
  }
}

}  // namespace tandem::gpu
