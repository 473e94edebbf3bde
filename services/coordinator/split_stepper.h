// A prefill worker and a decode worker as one gpu::Stepper for the
// Generator (tandem serve --split-roles).
//
// A sequence's items go to the prefill worker from position 0 until its
// prompt is done — the item that samples. That step also exports the
// sequence (its KV cache and history) to a file in `transfer_dir`, and the
// decode worker's next step imports it before running its items, so a
// handoff costs no extra round trip. Both workers run their parts of a step
// at the same time; the results come back in the items' order.
//
// Recovery stays the Generator's: a lost worker (kPeerLost) or a sequence a
// worker does not hold (kNotFound; a failed handoff is one) makes it replay
// every running sequence from position 0, which starts them on the prefill
// worker again. A failed step's transfer files are removed; so are those of
// sequences released before their import, any left when this object goes,
// any left by a killed predecessor (at start), and, now and then while idle,
// any no pending import names that are a minute old.
//
// A step ends when both workers have answered: they run at the same time,
// but a prompt chunk still delays that step's decode tokens (the scheduler's
// step token budget bounds the chunk). Items with all_logits are refused.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "services/gpu_worker/step.h"

namespace tandem::coordinator {

class SplitStepper final : public gpu::Stepper {
 public:
  SplitStepper(gpu::TransferStepper& prefill, gpu::TransferStepper& decode, std::string transfer_dir);
  ~SplitStepper() override;
  SplitStepper(const SplitStepper&) = delete;
  SplitStepper& operator=(const SplitStepper&) = delete;

  std::vector<gpu::SampledToken> step(std::span<const gpu::StepItem> items) override;
  void release(uint64_t sequence) override;
  void idle() override;
  bool wait_ready(std::chrono::steady_clock::time_point deadline) override;
  const ModelConfig& config() const override { return decode_.config(); }

  // Sequences imported by the decode worker (any thread may ask).
  uint64_t handoffs() const { return handoffs_.load(); }

 private:
  enum class Phase { kPrefill, kDecode };
  struct State {
    Phase phase = Phase::kPrefill;
    gpu::SequenceParams params;
  };
  void drop_pending(uint64_t sequence);
  // Removes transfer files in the directory older than min_age that no
  // pending import names.
  void sweep(std::chrono::seconds min_age);

  gpu::TransferStepper& prefill_;
  gpu::TransferStepper& decode_;
  std::string dir_;
  std::string name_;  // "sequence-<pid>-": this coordinator's transfer files
  std::chrono::steady_clock::time_point next_sweep_{};
  std::unordered_map<uint64_t, State> seqs_;
  std::vector<gpu::SequenceTransfer> pending_;  // exported; imported with the decode worker's next step
  uint64_t files_ = 0;                          // names transfer files
  std::atomic<uint64_t> handoffs_{0};
};

}  // namespace tandem::coordinator
