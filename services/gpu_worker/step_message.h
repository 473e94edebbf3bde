// Steps on the wire (proto/control.capnp: StepRequest, StepReply). Decoding
// copies the tokens out of the frame, so the items it returns stay valid
// after the frame is gone, and checks what the schema cannot (counts, the
// top_logprobs range); the StepRunner checks the rest.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "proto/control.capnp.h"
#include "services/gpu_worker/step.h"

namespace tandem::gpu {

void encode_step_request(proto::StepRequest::Builder out, std::span<const StepItem> items,
                         std::span<const uint64_t> release, std::span<const SequenceTransfer> imports = {},
                         std::span<const SequenceTransfer> exports = {});

struct DecodedStep {
  std::vector<StepItem> items;  // spans point into `tokens`, params into `params`
  std::vector<uint64_t> release;
  std::deque<std::vector<uint32_t>> tokens;
  std::deque<SequenceParams> params;
  std::vector<SequenceTransfer> imports, exports;
};
// Throws tandem::Error(kInvalidInput) naming the bad field.
DecodedStep decode_step_request(proto::StepRequest::Reader in);

void encode_step_reply(proto::StepReply::Builder out, std::span<const SampledToken> results);
// Throws kInvalidInput if the reply does not have `expected` entries.
std::vector<SampledToken> decode_step_reply(proto::StepReply::Reader in, size_t expected);

}  // namespace tandem::gpu
