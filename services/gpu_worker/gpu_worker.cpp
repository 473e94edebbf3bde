#include "services/gpu_worker/gpu_worker.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include "common/arena/arena.h"
#include "common/control/message.h"
#include "common/debug_hold.h"
#include "common/engine/model.h"
#include "common/error.h"
#include "common/shm/process.h"
#include "common/model/model_source.h"
#include "kernels/cpu/cpu_isa.h"
#include "services/gpu_worker/step_message.h"
#include "services/gpu_worker/step_runner.h"

namespace tandem::gpu {

using namespace std::chrono;

namespace {

enum class Served { kCoordinatorLost, kShutdown, kStopped };

// Answers steps until the coordinator is lost or says stop. A step that
// fails inside the model (an expert worker that did not come back) leaves
// the expert rings out of step: the worker then exits, to be restarted.
// Runs one request; throws only for the control plane (the coordinator is
// gone or not reading) or, after answering, for a step that broke the
// expert links (`fatal` set).
// A transfer file must be a *.kv file directly in the run directory.
void check_transfer_paths(const DecodedStep& step, const std::string& run_dir) {
  std::filesystem::path dir = std::filesystem::path(run_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // a trailing '/'
  for (const auto* list : {&step.imports, &step.exports})
    for (const SequenceTransfer& t : *list) {
      const std::filesystem::path p = std::filesystem::path(t.path).lexically_normal();
      if (p.parent_path() != dir || p.extension() != ".kv")
        fail_invalid("sequence {}: transfer file {} is not a .kv file in the run directory {}", t.sequence, t.path,
                     run_dir);
    }
}

std::optional<Served> handle(control::ControlClient& client, StepRunner& runner, const control::DecodedFrame& frame,
                             const std::string& run_dir, bool& fatal) {
  auto env = frame.envelope();
  if (env.which() == proto::Envelope::SHUTDOWN) {
    spdlog::info("told to stop: {}", env.getShutdown().getReason().cStr());
    return Served::kShutdown;
  }
  if (env.which() != proto::Envelope::STEP_REQUEST) {
    if (env.getRequestId() != 0)
      client.send_error(env.getRequestId(), ErrorKind::kUnsupported, "the gpu worker answers step requests only");
    return std::nullopt;
  }
  const uint64_t rid = env.getRequestId();
  DecodedStep step;
  try {
    step = decode_step_request(env.getStepRequest());
    check_transfer_paths(step, run_dir);
  } catch (const Error& e) {
    // The ended sequences go even so: the coordinator will not name them again.
    for (uint64_t s : env.getStepRequest().getRelease()) runner.release(s);
    client.send_error(rid, e.kind(), e.what());
    return std::nullopt;
  }
  for (uint64_t s : step.release) runner.release(s);
  const uint64_t adopted_before = runner.adopted();
  std::vector<std::string> exported;  // removed if the reply cannot be sent
  for (const SequenceTransfer& t : step.exports) exported.push_back(t.path);
  std::vector<SampledToken> out;
  bool told_to_stop = false;
  if (!step.items.empty() || !step.imports.empty() || !step.exports.empty()) {
    // The step runs on its own thread; this one heartbeats meanwhile (the
    // coordinator sends nothing else while it waits, but a Shutdown counts).
    auto done = std::async(std::launch::async, [&] {
      runner.begin({step.items, std::move(step.imports), std::move(step.exports)});
      return runner.finish();
    });
    try {
      while (done.wait_for(milliseconds(50)) != std::future_status::ready)
        if (auto f = client.poll(milliseconds(0)); f && f->envelope().which() == proto::Envelope::SHUTDOWN)
          told_to_stop = true;
    } catch (...) {
      done.wait();
      throw;
    }
    try {
      out = done.get();
    } catch (const Error& e) {
      client.send_error(rid, e.kind(), e.what());
      if (!runner.forward_failed()) return std::nullopt;  // the expert links are fine
      spdlog::error("step failed: {}; exiting to be restarted with fresh expert links", e.what());
      client.send_dying(e.what(), e.kind());
      fatal = true;
      throw;
    }
  }
  if (runner.adopted() != adopted_before)
    spdlog::info("took over {} sequence(s) from a predecessor's KV files", runner.adopted() - adopted_before);
  capnp::MallocMessageBuilder b;
  encode_step_reply(b.initRoot<proto::Envelope>().initStepReply(), out);
  try {
    client.reply(rid, b);
  } catch (...) {
    // The coordinator is gone: nobody will import what this step exported.
    for (const std::string& path : exported) remove_quietly(path);
    throw;
  }
  if (told_to_stop) return Served::kShutdown;
  return std::nullopt;
}

// Answers steps until the coordinator is lost or says stop.
Served serve(control::ControlClient& client, StepRunner& runner, const std::string& run_dir,
             const std::atomic<bool>& stop) {
  while (!stop.load()) {
    bool fatal = false;
    try {
      std::optional<control::DecodedFrame> frame = client.poll(milliseconds(100));
      if (!frame) continue;
      if (std::optional<Served> end = handle(client, runner, *frame, run_dir, fatal)) return *end;
    } catch (const Error& e) {
      if (fatal) throw;
      spdlog::warn("coordinator lost: {}", e.what());
      return Served::kCoordinatorLost;
    }
  }
  return Served::kStopped;
}

}  // namespace

int run_gpu_worker(const GpuWorkerOptions& o, zmq::context_t& context, const std::atomic<bool>& stop) {
  const auto t0 = steady_clock::now();
  arena::Arena a = arena::Arena::open(o.arena);
  const ModelConfig config = ModelSource::open(o.model)->config();
  RemoteExpertsOptions ro;
  // The launcher restarts a dead expert worker; here we wait for it to attach.
  ro.restart = [](int) { return false; };
  RemoteExperts remote(o.experts, ro);
  engine::Model model(config, ModelWeights::from_arena(a), kernels::choose_isa_from_environment());
  model.set_routed_experts(&remote);
  StepRunner runner(model);
  spdlog::info("role {}: the model's dense part is mapped from {} ({} expert worker(s)); ready in {:.0f} ms", o.role,
               o.arena, o.experts.size(), duration<double, std::milli>(steady_clock::now() - t0).count());
  if (o.hold) {
    hold_for_debugger(fmt::format("gpu worker {}", o.index), stop);
    if (stop) return 0;
  }
  control::ClientOptions co;
  // The start time orders this process after every earlier one at gpu/index
  // (a replacement on new rings after `scale` too).
  co.identity = {proto::Role::GPU, o.index, uint32_t(self_process().start_ticks)};
  co.capabilities = o.role == "both" ? "prefill,decode,host" : o.role + ",host";
  bool first = true;
  for (;;) {
    std::optional<control::ControlClient> client = control::join_coordinator(context, o.coordinator, co, stop);
    if (!client) return 0;
    // Sequences live in KV files of the run directory: a successor of this
    // process adopts them (the coordinator sends the lost step again).
    runner.persist(KvPersistence{fmt::format("{}/kv-g{}-", o.run_dir, o.index), client->server_process()});
    client->set_state(proto::PeerState::READY);
    if (first && !o.ready_file.empty()) write_pid_file(o.ready_file);
    first = false;
    const Served why = serve(*client, runner, o.run_dir, stop);
    if (why != Served::kCoordinatorLost) return 0;
    // Its sequences are gone with it; the next coordinator starts afresh.
    runner.clear();
  }
}

}  // namespace tandem::gpu
