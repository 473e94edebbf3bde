// Steps run by a gpu worker process: gpu::Stepper over the control plane.
// The coordinator's ROUTER (control::ControlServer) is owned by the caller and
// used only from the scheduler thread, through these objects: begin() sends
// a StepRequest to the joined gpu worker of this object's index, finish()
// polls until its StepReply, an Error, or the worker's loss (process gone:
// seen within the server's liveness check; hung: silent past the peer
// timeout). A newer gpu worker joining replaces the old one; the scheduler
// then replays its sequences.
//
// Two of them (a prefill and a decode worker, SplitStepper) share one
// server: each hands the events that are not about its worker to `other`,
// which passes them to the other's accept() — a reply that arrives while the
// other one polls is kept until its finish().
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/control/server.h"
#include "services/gpu_worker/step.h"

namespace tandem::coordinator {

class RemoteStepper final : public gpu::TransferStepper {
 public:
  // `config`: the model's (from its files' metadata). `index`: the gpu
  // worker this object steps. `other` sees every server event that is not
  // about that worker (e.g. the loader joining).
  RemoteStepper(control::ControlServer& server, ModelConfig config, uint32_t index = 0,
                std::function<void(control::ServerEvent&)> other = {});

  void set_other(std::function<void(control::ServerEvent&)> other) { other_ = std::move(other); }
  // Handles the event if it is about this object's gpu worker.
  bool accept(control::ServerEvent& ev);

  void begin(gpu::StepCall call) override;
  std::vector<gpu::SampledToken> finish() override;
  void release(uint64_t sequence) override { releases_.push_back(sequence); }
  void idle() override;
  bool wait_ready(std::chrono::steady_clock::time_point deadline) override;
  const ModelConfig& config() const override { return config_; }

  // A gpu worker has joined and not been lost (any thread may ask).
  bool has_worker() const { return has_worker_.load(); }
  uint32_t index() const { return index_; }

 private:
  // Polls the server once and dispatches its events.
  void pump(std::chrono::milliseconds timeout);

  control::ControlServer& server_;
  ModelConfig config_;
  uint32_t index_ = 0;
  std::function<void(control::ServerEvent&)> other_;
  std::optional<control::PeerIdentity> worker_;
  std::atomic<bool> has_worker_{false};
  bool lost_ = false;  // the worker of the step in flight was lost
  std::vector<uint64_t> releases_;
  // Sent since the worker last answered: sent again to its successor (a
  // release also removes the sequence's KV file, which the successor adopts).
  std::vector<uint64_t> unacked_releases_;
  void requeue_releases();
  std::string unreachable_;  // the last worker a send failed to, "role/index/epoch"
  std::chrono::steady_clock::time_point unreachable_since_{};
  // The step in flight: its request id (0: none), item count, worker, reply.
  uint64_t in_flight_ = 0;
  size_t in_flight_items_ = 0;
  control::PeerIdentity in_flight_to_{};
  std::optional<control::DecodedFrame> reply_;
  std::optional<Error> send_failure_;
};

}  // namespace tandem::coordinator
