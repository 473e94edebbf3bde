// The gpu worker's side of a step (step.h): every open sequence's KV cache,
// sampler and history, and one batched forward pass per step
// (Model::forward_last) followed by sampling and log-probabilities. Used
// directly by an in-process coordinator, and by the gpu worker process for
// the steps it receives over the control plane.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/engine/kv_cache.h"
#include "common/engine/model.h"
#include "services/gpu_worker/step.h"

namespace tandem::gpu {

class StepRunner final : public TransferStepper {
 public:
  explicit StepRunner(engine::Model& model) : model_(model) {}

  // Runs at finish(): first the imports (each replaces any sequence of its
  // id; a bad file is an error naming it, and the imports before it stay),
  // then the items, then the exports (each written and freed here).
  // The items are validated before anything of theirs changes, so a refused
  // step leaves every sequence as it was. A failure inside the forward pass
  // leaves the batch's sequences in an unknown state: they are dropped
  // (kNotFound next).
  void begin(StepCall call) override { call_ = std::move(call); }
  std::vector<SampledToken> finish() override;
  void release(uint64_t sequence) override { seqs_.erase(sequence); }
  const ModelConfig& config() const override { return model_.config(); }

  void clear() { seqs_.clear(); }
  size_t open_sequences() const { return seqs_.size(); }

 private:
  struct Sequence {
    Sequence(const engine::Model& m, const SequenceParams& p)
        : params(p), cache(m.new_cache(p.capacity)), sampler(p.sampling) {}
    void import_from(const engine::Model& m, const std::string& path);
    void export_to(const engine::Model& m, const std::string& path) const;
    SequenceParams params;
    engine::KvCache cache;
    engine::Sampler sampler;
    std::vector<uint32_t> history;  // every token in the cache, in order
  };
  std::vector<SampledToken> run(std::span<const StepItem> items);
  static void validate(const SequenceParams& p, uint64_t sequence, int64_t first_tokens);

  engine::Model& model_;
  StepCall call_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
};

// log-softmax of `logits` at `chosen`, and the `top` most likely ids (ties:
// lower id first) with theirs.
void token_logprobs(std::span<const float> logits, uint32_t chosen, int top, SampledToken& out);

}  // namespace tandem::gpu
