// One step of continuous batching, as the coordinator asks it of a gpu worker:
// for each sequence in the batch, tokens to append to its KV cache and
// whether to sample the token after them. The worker keeps each sequence's
// cache and sampler between steps; the coordinator keeps its tokens and text.
//
// Positions make the two agree: an item names how many tokens of the
// sequence the worker should already hold. A worker that does not hold them
// (it was restarted) answers kNotFound, and the coordinator replays the
// sequence from position 0 with the same chunks it used the first time — a
// row's numbers depend only on its own sequence (model.h; the fast kernels
// may take a blocked path by row count, which can change the last bits), and
// a random draw only on the seed and the position (sampler.h), so the
// replayed sequence continues with the tokens an undisturbed run would give.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/engine/sampler.h"
#include "common/model/config.h"

namespace tandem::gpu {

struct SequenceParams {
  int64_t capacity = 0;  // KV cache positions to reserve (prompt + max_tokens + 1)
  engine::SamplingParams sampling;
  int top_logprobs = -1;  // -1: none; 0..20: the chosen token's log-probability plus that many
};

struct StepItem {
  uint64_t sequence = 0;
  int64_t position = 0;               // tokens of the sequence the worker already holds
  std::span<const uint32_t> tokens;   // appended at `position`
  bool sample = false;                // sample the token after them
  const SequenceParams* params = nullptr;  // required at position 0: (re)opens the sequence
  bool all_logits = false;            // return the logits of every token (tandem logits)
};

struct SampledToken {
  bool sampled = false;
  uint32_t token = 0;
  float logprob = 0;                              // when top_logprobs >= 0
  std::vector<std::pair<uint32_t, float>> top;    // the most likely ids, best first
  std::vector<float> logits;                      // all_logits: one vocab row per token
};

// A sequence moved between gpu workers (a prefill worker hands each prompt's
// KV cache and history to the decode worker): written to `path` in the run
// directory after a step of one worker, read (and the file removed) before a
// step of the other (sequence_file.h).
struct SequenceTransfer {
  uint64_t sequence = 0;
  std::string path;
  SequenceParams params;  // an import's (an export ignores them)
};

// A step with transfers, as a split coordinator (SplitStepper) sends it.
struct StepCall {
  std::span<const StepItem> items;        // must stay valid until finish()
  std::vector<SequenceTransfer> imports;  // before the items run
  std::vector<SequenceTransfer> exports;  // after they ran (sequences whose prompt is done)
};

// Where steps run: in this process (StepRunner) or in a gpu worker process
// over the control plane (coordinator::RemoteStepper).
class Stepper {
 public:
  virtual ~Stepper() = default;
  // One entry per item. Throws tandem::Error: kNotFound when the worker does
  // not hold a sequence at the position given (replay it from 0), kPeerLost
  // when the worker is gone (replay every sequence once it is back),
  // kInvalidInput for a bad item; others for failures of the step itself.
  virtual std::vector<SampledToken> step(std::span<const StepItem> items) = 0;
  // The sequence has ended; its cache may be freed (perhaps at the next step).
  virtual void release(uint64_t sequence) = 0;
  // Called by an idle scheduler at least every 100 ms.
  virtual void idle() {}
  // After kPeerLost: waits for a worker to step again; false at the deadline.
  virtual bool wait_ready(std::chrono::steady_clock::time_point) { return true; }
  virtual const ModelConfig& config() const = 0;
};

// A worker that can take part in a prefill/decode split: a step with
// transfers is started and collected separately, so that the prefill and
// the decode worker run theirs at the same time. One call in flight at a
// time; finish() throws as step() does.
class TransferStepper : public Stepper {
 public:
  virtual void begin(StepCall call) = 0;
  virtual std::vector<SampledToken> finish() = 0;
  std::vector<SampledToken> step(std::span<const StepItem> items) final {
    begin({items, {}, {}});
    return finish();
  }
};

}  // namespace tandem::gpu
