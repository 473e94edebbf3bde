#include "services/expert_worker/expert_worker.h"

#include <unistd.h>

#include <charconv>
#include <cstddef>
#include <cstring>
#include <chrono>

#include <spdlog/spdlog.h>

#include "common/arena/arena.h"
#include "common/debug_hold.h"
#include "common/error.h"
#include "common/ring/ring.h"
#include "services/expert_worker/expert_compute.h"
#include "services/expert_worker/work_message.h"

namespace tandem::expert {

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const char* b = text.data() + at;
    const char* e = text.data() + comma;
    int lo = -1, hi = -1;
    auto r = std::from_chars(b, e, lo);
    if (r.ec == std::errc() && r.ptr < e && *r.ptr == '-') r = std::from_chars(r.ptr + 1, e, hi);
    else hi = lo;
    if (r.ec != std::errc() || r.ptr != e || lo < 0 || hi < lo)
      fail_invalid("CPU list '{}': expected numbers and ranges such as 0-3,8", text);
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    at = comma + 1;
  }
  if (cpus.empty()) fail_invalid("CPU list '{}' is empty", text);
  return cpus;
}

namespace {

using namespace std::chrono;

// Answers one request in place: the result is written straight into the
// response slot.
void answer(const RingMessage& m, ExpertCompute& compute, RingWriter& out, int worker) {
  std::span<std::byte> slot;
  try {
    slot = out.reserve(deadline_in(seconds(30)));
  } catch (const Error& e) {
    // Once per new reader: a restarted requester replaced the one last seen.
    // Its requests must be answered; a dead reader throws again.
    if (e.kind() != ErrorKind::kPeerLost) throw;
    spdlog::info("{}", e.what());
    slot = out.reserve(deadline_in(seconds(30)));
  }
  ResultHeader r;
  r.worker = worker;
  r.pid = int32_t(::getpid());
  size_t bytes = 0;
  // The id first, so that even a request that fails validation is answered
  // under its own id.
  if (m.bytes.size() >= sizeof(WorkHeader)) std::memcpy(&r.id, m.bytes.data() + offsetof(WorkHeader, id), sizeof r.id);
  try {
    WorkView w = decode_work(m.bytes);
    r.id = w.header.id;
    r.layer = w.header.layer;
    r.n_tokens = w.header.n_tokens;
    r.hidden = w.header.hidden;
    if (w.header.hidden != compute.hidden())
      fail_invalid("hidden size {} != this model's {}", w.header.hidden, compute.hidden());
    if (result_bytes(w.header.n_tokens, w.header.hidden) > slot.size())
      fail_invalid("{} tokens do not fit the response slot of {} bytes", w.header.n_tokens, slot.size());
    compute.run(w.header.layer, w.header.n_tokens, w.header.top_k, w.x, w.expert_ids,
                w.expert_weights, result_payload(slot));
    r.kind = ResultKind::kResult;
    bytes = encode_result_header(slot, r) + result_bytes(r.n_tokens, r.hidden) - sizeof(ResultHeader);
  } catch (const Error& e) {
    spdlog::warn("request {} (sequence {}): {}", r.id, m.sequence, e.what());
    r.kind = ResultKind::kError;
    bytes = encode_result_header(slot, r, e.what());
  }
  out.publish(bytes);
}

}  // namespace

int run_expert_worker(const WorkerOptions& o, kernels::CpuIsa isa, const std::atomic<bool>& stop) {
  const auto t0 = steady_clock::now();
  arena::Arena a = arena::Arena::open(o.arena);
  RingReader in = RingReader::attach(o.requests);
  RingWriter out = RingWriter::attach(o.responses);
  kernels::ThreadPool::Options po;
  po.threads = o.threads;
  po.cpus = o.cpus;
  po.pin_caller = !o.cpus.empty();
  kernels::ThreadPool pool = kernels::ThreadPool::create(po);
  ComputeOptions co;
  co.worker = o.worker;
  co.isa = isa;
  co.top_k = o.top_k;
  // The hidden size, from the slices, gives the most tokens a message can
  // carry; the requester sends no more.
  int64_t h = 0;
  for (const auto& t : a.tensors())
    if (t.worker == o.worker && t.shape.size() == 3) {
      h = int64_t(t.name.find("down") != std::string::npos ? t.shape[1] : t.shape[2]);
      break;
    }
  if (h == 0) fail(ErrorKind::kNotFound, "arena {} has no expert slices for worker {}", o.arena, o.worker);
  co.max_tokens = tokens_per_slot(in.shape().slot_bytes, out.shape().slot_bytes, h, co.top_k);
  if (co.max_tokens < 1)
    fail_invalid("the rings' slots ({} and {} bytes) cannot carry one token of hidden size {}",
                 in.shape().slot_bytes, out.shape().slot_bytes, h);
  ExpertCompute compute(a, co, pool);
  if (o.hold) {
    // Before kReady: the requester waits for this worker meanwhile.
    hold_for_debugger(fmt::format("expert worker {}", o.worker), stop);
    if (stop) return 0;
  }
  {
    std::span<std::byte> slot = out.reserve(deadline_in(seconds(30)));
    ResultHeader r;
    r.kind = ResultKind::kReady;
    r.worker = o.worker;
    r.pid = int32_t(::getpid());
    r.hidden = int32_t(compute.hidden());
    r.ffn_begin = compute.ffn_begin();
    r.ffn_end = compute.ffn_end();
    const std::string text = fmt::format("{} kernels, {} threads", compute.fused() ? "fused" : "reference", o.threads);
    out.publish(encode_result_header(slot, r, text));
  }
  if (!o.ready_file.empty()) write_pid_file(o.ready_file);
  spdlog::info("serving expert slice F[{}, {}) of {} experts x {} layers from {} ({} threads, {} kernels, "
               "up to {} tokens a message); ready in {:.0f} ms",
               compute.ffn_begin(), compute.ffn_end(), compute.n_experts(), compute.n_layers(),
               o.arena, o.threads, compute.fused() ? "fused" : "reference", co.max_tokens,
               duration<double, std::milli>(steady_clock::now() - t0).count());
  uint64_t served = 0;
  while (!stop.load()) {
    std::optional<RingMessage> m;
    try {
      m = in.peek(deadline_in(milliseconds(200)));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kPeerLost) {
        spdlog::info("requester lost ({}); waiting for it to come back", e.what());
      } else if (e.kind() != ErrorKind::kTimeout) {
        throw;
      }
      if (o.parent && !is_alive(*o.parent)) {
        spdlog::info("the process that started this worker is gone; exiting");
        return 0;
      }
      continue;
    }
    try {
      answer(*m, compute, out, o.worker);
    } catch (const Error& e) {
      // The requester stopped reading its responses (it died): drop the
      // request; its successor re-sends what it needs.
      if (e.kind() != ErrorKind::kPeerLost && e.kind() != ErrorKind::kTimeout) throw;
      spdlog::info("could not answer: {}", e.what());
    }
    in.release();
    ++served;
  }
  spdlog::info("stopping after {} requests", served);
  return 0;
}

}  // namespace tandem::expert
