// The messages on an expert worker's rings (ring.h carries the bytes).
//
// Requests (requester -> worker): one MoE layer's routed work for a chunk of
// tokens — WorkHeader, then x (n_tokens x hidden f32), the chosen expert ids
// (n_tokens x top_k int32, -1 = none) and their weights (n_tokens x top_k
// f32). Responses (worker -> requester): ResultHeader, then this worker's
// partial sum y (n_tokens x hidden f32), an error text, or, once after the
// worker attached, a kReady with its slice of the experts. Fixed-layout
// little-endian structs: both ends are the same build on the same machine
// (the magic carries a version, so a stale binary is refused, not misread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem::expert {

inline constexpr uint32_t kWorkMagic = 0x31575854;    // "TXW1"
inline constexpr uint32_t kResultMagic = 0x31525854;  // "TXR1"

enum class ResultKind : uint32_t { kReady = 1, kResult = 2, kError = 3 };

struct WorkHeader {
  uint32_t magic = kWorkMagic;
  uint32_t reserved = 0;
  uint64_t id = 0;  // the requester's id, echoed in the result
  int32_t layer = 0, n_tokens = 0, top_k = 0, hidden = 0;
  uint64_t pad[4] = {};
};
static_assert(sizeof(WorkHeader) == 64);

struct ResultHeader {
  uint32_t magic = kResultMagic;
  ResultKind kind = ResultKind::kResult;
  uint64_t id = 0;
  int32_t layer = 0, n_tokens = 0, hidden = 0, worker = 0;
  int32_t pid = 0;
  uint32_t text_bytes = 0;   // kError: the message; kReady: a description
  uint64_t ffn_begin = 0, ffn_end = 0;  // kReady: this worker's F slice
  uint64_t pad = 0;
};
static_assert(sizeof(ResultHeader) == 64);

// Bytes of a request / a result for n tokens.
size_t work_bytes(int64_t n_tokens, int64_t hidden, int top_k);
size_t result_bytes(int64_t n_tokens, int64_t hidden);
// The most tokens a slot of slot_bytes can carry either way.
int64_t tokens_per_slot(size_t request_slot_bytes, size_t result_slot_bytes, int64_t hidden,
                        int top_k);

struct WorkView {
  WorkHeader header;
  const float* x = nullptr;
  const int32_t* expert_ids = nullptr;
  const float* expert_weights = nullptr;
};

// Writes a request into `slot`; returns its length. Throws kInternal when it
// does not fit.
size_t encode_work(std::span<std::byte> slot, const WorkHeader& h, const float* x,
                   const int32_t* expert_ids, const float* expert_weights);
// Validates a request's magic and length; throws kInvalidInput naming the
// problem. The pointers point into `message` (4-byte aligned by the ring).
WorkView decode_work(std::span<const std::byte> message);

struct ResultView {
  ResultHeader header;
  const float* y = nullptr;  // kResult
  std::string_view text;     // kError, kReady
};
// Writes a result header (+ text) into `slot`; the caller writes y after
// it at result_payload(slot). Returns the header + text length.
size_t encode_result_header(std::span<std::byte> slot, const ResultHeader& h,
                            std::string_view text = {});
inline float* result_payload(std::span<std::byte> slot) {
  return reinterpret_cast<float*>(slot.data() + sizeof(ResultHeader));
}
ResultView decode_result(std::span<const std::byte> message);

}  // namespace tandem::expert
