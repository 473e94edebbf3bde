// Routed experts computed by the expert workers: engine::RoutedExperts over
// one pair of rings per worker (work_message.h has the bytes). start() cuts
// the batch into chunks a slot can carry and sends each to every worker;
// finish() adds the workers' partial sums in worker order (so the result does
// not depend on who answers first), sending further chunks as slots free up.
// A worker that stops answering is an error naming it, within the deadline,
// never a hang. A worker that dies is restarted through `restart` when one is
// given: the new process attaches the same rings with a new epoch, reads the
// requests its predecessor had not released (ring.h) and answers them; answers
// the predecessor had already published are kept and duplicates skipped, so
// the batch completes with the same numbers.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/engine/routed_experts.h"
#include "common/error.h"
#include "common/ring/ring.h"

namespace tandem::gpu {

struct ExpertLinkPaths {
  std::string requests, responses;  // created by the requester (RingFile::create)
};

struct RemoteExpertsOptions {
  std::chrono::milliseconds reply_timeout{60000};  // per message, while the worker lives
  RingOptions ring;
  // Starts worker `w` again if its process is gone and returns true; returns
  // false if it runs (it may be a restarted one that has not attached yet);
  // throws if it cannot. Empty: a dead worker is an error.
  std::function<bool(int w)> restart;
  int max_restarts = 5;  // per worker, over the object's life
};

class RemoteExperts final : public engine::RoutedExperts {
 public:
  // Attaches the requester's ends of every worker's rings.
  RemoteExperts(const std::vector<ExpertLinkPaths>& links, RemoteExpertsOptions options = {});
  ~RemoteExperts() override;

  // Waits for every worker's kReady until the deadline. `check` is called
  // while waiting (about every 100 ms) and should throw if a worker's process
  // has exited before attaching.
  void wait_ready(Deadline deadline, const std::function<void()>& check);

  void start(const engine::RoutedWork& work) override;
  void finish() override;

  int workers() const { return int(links_.size()); }
  int64_t tokens_per_message() const { return tokens_per_message_; }
  uint64_t messages_sent() const { return next_id_ - start_id_; }
  int restarts() const;
  // This requester's epoch on its rings (grows with every requester that
  // attaches them); request ids start above every earlier requester's.
  uint32_t epoch() const;
  // When worker w's latest ready message was read (for benchmarks).
  Deadline ready_at(int w) const { return links_.at(size_t(w)).ready_at; }

 private:
  struct Link {
    RingWriter to;
    RingReader from;
    int worker;
    int restarts = 0;
    Deadline attach_deadline{};  // while a restarted worker has not said ready
    Deadline ready_at{};         // when its last kReady was read
  };
  void send_chunk(size_t chunk);
  void receive(size_t chunk, Link& link, bool first);
  // A ring said the worker is gone (or was replaced): restart it, or rethrow.
  void recover(Link& link, const Error& e);

  std::vector<Link> links_;
  RemoteExpertsOptions options_;
  int64_t tokens_per_message_ = 0;
  engine::RoutedWork work_;
  bool active_ = false;
  bool broken_ = false;
  std::string broken_reason_;
  size_t n_chunks_ = 0, sent_ = 0;
  uint64_t next_id_ = 1, first_id_ = 0, start_id_ = 1;
};

}  // namespace tandem::gpu
