#include "services/expert_worker/work_message.h"

#include <cstring>

#include "common/error.h"

namespace tandem::expert {

size_t work_bytes(int64_t n_tokens, int64_t hidden, int top_k) {
  return sizeof(WorkHeader) + size_t(n_tokens) * (size_t(hidden) * 4 + size_t(top_k) * 8);
}

size_t result_bytes(int64_t n_tokens, int64_t hidden) {
  return sizeof(ResultHeader) + size_t(n_tokens) * size_t(hidden) * 4;
}

int64_t tokens_per_slot(size_t request_slot_bytes, size_t result_slot_bytes, int64_t hidden,
                        int top_k) {
  if (request_slot_bytes < sizeof(WorkHeader) || result_slot_bytes < sizeof(ResultHeader)) return 0;
  const int64_t a = int64_t((request_slot_bytes - sizeof(WorkHeader)) / (size_t(hidden) * 4 + size_t(top_k) * 8));
  const int64_t b = int64_t((result_slot_bytes - sizeof(ResultHeader)) / (size_t(hidden) * 4));
  return a < b ? a : b;
}

size_t encode_work(std::span<std::byte> slot, const WorkHeader& h, const float* x,
                   const int32_t* expert_ids, const float* expert_weights) {
  const size_t n = size_t(h.n_tokens), H = size_t(h.hidden), K = size_t(h.top_k);
  const size_t bytes = work_bytes(h.n_tokens, h.hidden, h.top_k);
  if (bytes > slot.size())
    fail(ErrorKind::kInternal, "expert work of {} tokens needs {} bytes; the ring slot holds {}", n,
         bytes, slot.size());
  std::byte* p = slot.data();
  std::memcpy(p, &h, sizeof h);
  p += sizeof h;
  std::memcpy(p, x, n * H * 4);
  p += n * H * 4;
  std::memcpy(p, expert_ids, n * K * 4);
  p += n * K * 4;
  std::memcpy(p, expert_weights, n * K * 4);
  return bytes;
}

WorkView decode_work(std::span<const std::byte> message) {
  WorkView v;
  if (message.size() < sizeof(WorkHeader))
    fail_invalid("expert work message of {} bytes is shorter than its header", message.size());
  std::memcpy(&v.header, message.data(), sizeof v.header);
  const WorkHeader& h = v.header;
  if (h.magic != kWorkMagic)
    fail_invalid("expert work message has magic {:#x}, expected {:#x} (a different build?)", h.magic,
                 kWorkMagic);
  if (h.n_tokens < 0 || h.top_k < 1 || h.top_k > 1024 || h.hidden < 1)
    fail_invalid("expert work message has n_tokens {}, top_k {}, hidden {}", h.n_tokens, h.top_k,
                 h.hidden);
  if (message.size() != work_bytes(h.n_tokens, h.hidden, h.top_k))
    fail_invalid("expert work message is {} bytes; {} tokens x hidden {} x top_k {} need {}",
                 message.size(), h.n_tokens, h.hidden, h.top_k,
                 work_bytes(h.n_tokens, h.hidden, h.top_k));
  const std::byte* p = message.data() + sizeof(WorkHeader);
  v.x = reinterpret_cast<const float*>(p);
  p += size_t(h.n_tokens) * size_t(h.hidden) * 4;
  v.expert_ids = reinterpret_cast<const int32_t*>(p);
  p += size_t(h.n_tokens) * size_t(h.top_k) * 4;
  v.expert_weights = reinterpret_cast<const float*>(p);
  return v;
}

size_t encode_result_header(std::span<std::byte> slot, const ResultHeader& h, std::string_view text) {
  ResultHeader out = h;
  const size_t room = slot.size() - sizeof(ResultHeader);
  if (text.size() > room) text = text.substr(0, room);
  out.text_bytes = uint32_t(text.size());
  std::memcpy(slot.data(), &out, sizeof out);
  std::memcpy(slot.data() + sizeof out, text.data(), text.size());
  return sizeof out + text.size();
}

ResultView decode_result(std::span<const std::byte> message) {
  ResultView v;
  if (message.size() < sizeof(ResultHeader))
    fail(ErrorKind::kInternal, "expert result of {} bytes is shorter than its header", message.size());
  std::memcpy(&v.header, message.data(), sizeof v.header);
  const ResultHeader& h = v.header;
  if (h.magic != kResultMagic)
    fail(ErrorKind::kInternal, "expert result has magic {:#x}, expected {:#x} (a different build?)",
         h.magic, kResultMagic);
  const std::byte* p = message.data() + sizeof(ResultHeader);
  if (h.kind == ResultKind::kResult) {
    if (h.n_tokens < 0 || h.hidden < 1 || message.size() != result_bytes(h.n_tokens, h.hidden))
      fail(ErrorKind::kInternal, "expert result is {} bytes for {} tokens x hidden {}",
           message.size(), h.n_tokens, h.hidden);
    v.y = reinterpret_cast<const float*>(p);
  } else if (h.kind == ResultKind::kError || h.kind == ResultKind::kReady) {
    if (message.size() != sizeof(ResultHeader) + h.text_bytes)
      fail(ErrorKind::kInternal, "expert message text of {} bytes in a message of {}", h.text_bytes,
           message.size());
    v.text = std::string_view(reinterpret_cast<const char*>(p), h.text_bytes);
  } else {
    fail(ErrorKind::kInternal, "expert result of unknown kind {}", uint32_t(h.kind));
  }
  return v;
}

}  // namespace tandem::expert
