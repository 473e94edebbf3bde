// Steps run by the gpu worker process: gpu::Stepper over the control plane.
// The coordinator's ROUTER (control::ControlServer) is owned by the caller and
// used only from the scheduler thread, through this object: step() sends a
// StepRequest to the joined gpu worker and polls until its StepReply, an
// Error, or the worker's loss (process gone: seen within the server's
// liveness check; hung: silent past the peer timeout). A newer gpu worker
// joining replaces the old one; the scheduler then replays its sequences.
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

class RemoteStepper final : public gpu::Stepper {
 public:
  // `config`: the model's (from its files' metadata). `other` sees every
  // server event that is not about the gpu worker (e.g. the loader joining).
  RemoteStepper(control::ControlServer& server, ModelConfig config,
                std::function<void(control::ServerEvent&)> other = {});

  std::vector<gpu::SampledToken> step(std::span<const gpu::StepItem> items) override;
  void release(uint64_t sequence) override { releases_.push_back(sequence); }
  void idle() override;
  bool wait_ready(std::chrono::steady_clock::time_point deadline) override;
  const ModelConfig& config() const override { return config_; }

  // A gpu worker has joined and not been lost (any thread may ask).
  bool has_worker() const { return has_worker_.load(); }

 private:
  // Polls once; handles joins and losses; returns the reply to `waiting_for`
  // if it came.
  std::optional<control::DecodedFrame> pump(std::chrono::milliseconds timeout, uint64_t waiting_for);

  control::ControlServer& server_;
  ModelConfig config_;
  std::function<void(control::ServerEvent&)> other_;
  std::optional<control::PeerIdentity> worker_;
  std::atomic<bool> has_worker_{false};
  bool lost_ = false;  // the worker of the step in flight was lost
  std::vector<uint64_t> releases_;
  std::string unreachable_;  // the last worker a send failed to, "role/index/epoch"
  std::chrono::steady_clock::time_point unreachable_since_{};
};

}  // namespace tandem::coordinator
