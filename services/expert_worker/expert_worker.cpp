#include "services/expert_worker/expert_worker.h"

#include <unistd.h>

#include <charconv>
#include <cstddef>
#include <cstring>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

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
// response slot. Only the compute holds `compute_mu` (a requester that stops
// reading its responses must not hold up the others).
void answer(const RingMessage& m, ExpertCompute& compute, std::mutex& compute_mu, RingWriter& out, int worker) {
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
    std::lock_guard lk(compute_mu);
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

namespace {

// Sends the kReady result that tells a requester this worker serves its
// slice. A requester that is gone with its response ring full does not get
// it (nor needs it: its successor takes results without one), and does not
// stop the worker serving the others.
void announce_ready(size_t link, RingWriter& out, const ExpertCompute& compute, const WorkerOptions& o) {
  std::span<std::byte> slot;
  try {
    slot = out.reserve(deadline_in(seconds(1)));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kPeerLost && e.kind() != ErrorKind::kTimeout) throw;
    spdlog::info("requester {} not told that this worker is ready: {}", link, e.what());
    return;
  }
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

struct Served {
  uint64_t requests = 0;
};

// One requester's loop: answers its requests until `quit` or the parent is
// gone (then sets `quit` for the other loops). The compute runs under
// `compute_mu`: requesters take turns on the thread pool.
void serve_link(size_t link, RingReader& in, RingWriter& out, ExpertCompute& compute, std::mutex& compute_mu,
                const WorkerOptions& o, std::atomic<bool>& quit, Served& served) {
  announce_ready(link, out, compute, o);
  while (!quit.load()) {
    std::optional<RingMessage> m;
    try {
      m = in.peek(deadline_in(milliseconds(200)));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kPeerLost) {
        spdlog::info("requester {} lost ({}); waiting for it to come back", link, e.what());
      } else if (e.kind() != ErrorKind::kTimeout) {
        throw;
      }
      if (o.parent && !is_alive(*o.parent)) {
        spdlog::info("the process that started this worker is gone; exiting");
        quit = true;
      }
      continue;
    }
    try {
      answer(*m, compute, compute_mu, out, o.worker);
    } catch (const Error& e) {
      // The requester stopped reading its responses (it died): drop the
      // request; its successor re-sends what it needs.
      if (e.kind() != ErrorKind::kPeerLost && e.kind() != ErrorKind::kTimeout) throw;
      spdlog::info("could not answer requester {}: {}", link, e.what());
    }
    in.release();
    ++served.requests;
  }
}

}  // namespace

int run_expert_worker(const WorkerOptions& o, kernels::CpuIsa isa, const std::atomic<bool>& stop) {
  const auto t0 = steady_clock::now();
  if (o.links.empty()) fail_invalid("an expert worker needs at least one pair of rings");
  arena::Arena a = arena::Arena::open(o.arena);
  std::vector<RingReader> ins;
  std::vector<RingWriter> outs;
  for (const WorkerOptions::Link& l : o.links) {
    ins.push_back(RingReader::attach(l.requests));
    outs.push_back(RingWriter::attach(l.responses));
  }
  kernels::ThreadPool::Options po;
  po.threads = o.threads;
  po.cpus = o.cpus;
  po.pin_caller = !o.cpus.empty();
  // Pins this thread to cpus[0]; the receiving threads started below inherit
  // that, so pool thread 0 runs there whichever requester's chunk it is.
  kernels::ThreadPool pool = kernels::ThreadPool::create(po);
  ComputeOptions co;
  co.worker = o.worker;
  co.isa = isa;
  co.top_k = o.top_k;
  // The hidden size, from the slices, gives the most tokens a message can
  // carry; the requester sends no more.
  int64_t h = 0;
  for (const auto& t : a.tensors())
    if (t.worker == o.worker && t.shape.size() == 3 && t.name.ends_with("_exps.weight")) {
      h = int64_t(t.name.find("down") != std::string::npos ? t.shape[1] : t.shape[2]);
      break;
    }
  if (h == 0) fail(ErrorKind::kNotFound, "arena {} has no expert slices for worker {}", o.arena, o.worker);
  co.max_tokens = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    const int64_t t = tokens_per_slot(ins[i].shape().slot_bytes, outs[i].shape().slot_bytes, h, co.top_k);
    if (t < 1)
      fail_invalid("the rings' slots ({} and {} bytes) cannot carry one token of hidden size {}",
                   ins[i].shape().slot_bytes, outs[i].shape().slot_bytes, h);
    co.max_tokens = std::max(co.max_tokens, t);
  }
  ExpertCompute compute(a, co, pool);
  if (o.hold) {
    // Before kReady: the requesters wait for this worker meanwhile.
    hold_for_debugger(fmt::format("expert worker {}", o.worker), stop);
    if (stop) return 0;
  }
  if (!o.ready_file.empty()) write_pid_file(o.ready_file);
  spdlog::info("serving expert slice F[{}, {}) of {} experts x {} layers from {} to {} requester(s) ({} threads, {} "
               "kernels, up to {} tokens a message); ready in {:.0f} ms",
               compute.ffn_begin(), compute.ffn_end(), compute.n_experts(), compute.n_layers(), o.arena, ins.size(),
               o.threads, compute.fused() ? "fused" : "reference", co.max_tokens,
               duration<double, std::milli>(steady_clock::now() - t0).count());
  std::atomic<bool> quit{false};
  std::mutex compute_mu;
  std::vector<Served> served(ins.size());
  std::exception_ptr failure;
  std::mutex failure_mu;
  {
    std::vector<std::jthread> others;
    for (size_t i = 1; i < ins.size(); ++i)
      others.emplace_back([&, i] {
        try {
          serve_link(i, ins[i], outs[i], compute, compute_mu, o, quit, served[i]);
        } catch (...) {
          std::lock_guard lk(failure_mu);
          if (!failure) failure = std::current_exception();
          quit = true;
        }
      });
    std::jthread watch_stop([&](std::stop_token st) {
      while (!st.stop_requested() && !quit.load()) {
        if (stop.load()) quit = true;
        std::this_thread::sleep_for(milliseconds(20));
      }
    });
    try {
      serve_link(0, ins[0], outs[0], compute, compute_mu, o, quit, served[0]);
    } catch (...) {
      std::lock_guard lk(failure_mu);
      if (!failure) failure = std::current_exception();
      quit = true;
    }
  }
  if (failure) std::rethrow_exception(failure);
  uint64_t total = 0;
  for (const Served& s : served) total += s.requests;
  spdlog::info("stopping after {} requests", total);
  return 0;
}

}  // namespace tandem::expert
