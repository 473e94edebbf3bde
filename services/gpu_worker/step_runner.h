// The gpu worker's side of a step (step.h): every open sequence's KV cache,
// sampler and history, and one batched forward pass per step
// (Model::forward_last) followed by sampling and log-probabilities. Used
// directly by an in-process coordinator, and by the gpu worker process for
// the steps it receives over the control plane.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/engine/kv_cache.h"
#include "common/engine/model.h"
#include "services/gpu_worker/kv_file.h"
#include "services/gpu_worker/step.h"

namespace tandem::gpu {

// Where a gpu worker keeps its sequences so that its successor adopts them
// (kv_file.h): file `prefix<sequence>.kv`, belonging to `coordinator`.
struct KvPersistence {
  std::string prefix;
  ProcessId coordinator;
};

class StepRunner final : public TransferStepper {
 public:
  explicit StepRunner(engine::Model& model) : model_(model) {}

  // Runs at finish(): first the imports (each replaces any sequence of its
  // id; a bad file is an error naming it, and the imports before it stay),
  // then the items, then the exports (each written and freed here).
  // The items are validated before anything of theirs changes, so a refused
  // step leaves every sequence as it was — except that a sequence held
  // beyond the item's position is cut back to it (its step was answered but
  // the answer lost; the coordinator sends those tokens again), and one not
  // held may be adopted from its KV file. A failure inside the forward pass
  // leaves the batch's sequences in an unknown state: they are dropped
  // (their files keep the last committed step).
  void begin(StepCall call) override { call_ = std::move(call); }
  std::vector<SampledToken> finish() override;
  void release(uint64_t sequence) override;
  const ModelConfig& config() const override { return model_.config(); }

  // From now on every sequence opened lives in a KV file (nullopt: in this
  // process only). Removes files of other coordinators under the prefix.
  void persist(std::optional<KvPersistence> p);
  // Drops every sequence (and its file).
  void clear();
  size_t open_sequences() const { return seqs_.size(); }
  uint64_t adopted() const { return adopted_; }  // sequences taken over from KV files
  // The last finish() failed inside the forward pass (not in checking the
  // items or moving sequences): e.g. the expert links broke.
  bool forward_failed() const { return forward_failed_; }

 private:
  struct Sequence {
    Sequence(const engine::Model& m, const SequenceParams& p)
        : params(p), cache(m.new_cache(p.capacity)), sampler(p.sampling) {}
    Sequence(const engine::Model& m, KvFile f, int64_t size)
        : params(f.params()), file(std::move(f)), cache(file->cache(m.config(), size)), sampler(params.sampling) {}
    Sequence(const Sequence&) = delete;  // the cache may point into `file`
    Sequence& operator=(const Sequence&) = delete;
    void import_from(const engine::Model& m, const std::string& path);
    void export_to(const engine::Model& m, const std::string& path) const;
    // Writes the history to the file and commits the cache's positions.
    void commit();
    SequenceParams params;
    std::optional<KvFile> file;  // before cache: the cache's rows may be in it
    engine::KvCache cache;
    engine::Sampler sampler;
    std::vector<uint32_t> history;  // every token in the cache, in order
  };
  std::vector<SampledToken> run(std::span<const StepItem> items);
  static void validate(const SequenceParams& p, uint64_t sequence, int64_t first_tokens);
  std::unique_ptr<Sequence> open(uint64_t sequence, const SequenceParams& p);
  // The sequence at `position`: held (cut back if beyond), adopted from its
  // file, or nullptr.
  Sequence* find_at(uint64_t sequence, int64_t position);
  std::string path_of(uint64_t sequence) const { return persist_->prefix + std::to_string(sequence) + ".kv"; }

  engine::Model& model_;
  StepCall call_;
  std::optional<KvPersistence> persist_;
  uint64_t adopted_ = 0;
  bool forward_failed_ = false;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
};

// log-softmax of `logits` at `chosen`, and the `top` most likely ids (ties:
// lower id first) with theirs.
void token_logprobs(std::span<const float> logits, uint32_t chosen, int top, SampledToken& out);

}  // namespace tandem::gpu
