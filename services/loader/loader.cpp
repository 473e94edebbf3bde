#include "services/loader/loader.h"

#include <chrono>
#include <charconv>

#include <capnp/message.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/arena/arena.h"
#include "common/debug_hold.h"
#include "common/control/client.h"
#include "common/control/coordinator_link.h"
#include "common/error.h"
#include "common/model/model_source.h"
#include "common/shm/run_dir.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/weight_layout.h"
#include "proto/control.capnp.h"

namespace tandem::loader {

std::vector<int> parse_worker_nodes(const std::string& text) {
  std::vector<int> nodes;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    int n = -1;
    auto r = std::from_chars(text.data() + at, text.data() + comma, n);
    if (r.ec != std::errc() || r.ptr != text.data() + comma || n < 0)
      fail_invalid("--worker-nodes '{}': expected NUMA node numbers separated by commas, e.g. 0,0,1", text);
    nodes.push_back(n);
    at = comma + 1;
  }
  return nodes;
}

namespace {

// Serves until stopped or told to (true), or until the coordinator is lost
// with `rejoin` set (false).
bool serve(control::ControlClient& client, const std::string& endpoint, const arena::Arena& a,
           const std::atomic<bool>& stop, bool rejoin) {
  using namespace std::chrono;
  try {
    client.set_state(proto::PeerState::READY);
    spdlog::info("serving the manifest of {} at {}", a.path(), endpoint);
    while (!stop.load()) {
      std::optional<control::DecodedFrame> frame;
      try {
        frame = client.poll(milliseconds(200));
      } catch (const Error& e) {
        if (!rejoin || (e.kind() != ErrorKind::kPeerLost && e.kind() != ErrorKind::kTimeout)) throw;
        spdlog::warn("coordinator lost: {}", e.what());
        return false;
      }
      if (!frame) continue;
      auto env = frame->envelope();
      switch (env.which()) {
        case proto::Envelope::MANIFEST_REQUEST: {
          capnp::MallocMessageBuilder b;
          auto reply = b.initRoot<proto::Envelope>().initManifestReply();
          reply.setArenaPath(a.path());
          reply.setArenaSize(a.size());
          reply.setManifestVersion(a.header().format_version);
          client.reply(env.getRequestId(), b);
          break;
        }
        case proto::Envelope::SHUTDOWN:
          spdlog::info("told to stop: {}", env.getShutdown().getReason().cStr());
          return true;
        default:
          if (env.getRequestId() != 0)
            client.send_error(env.getRequestId(), ErrorKind::kUnsupported,
                              "the loader answers manifest requests only");
          break;
      }
    }
    spdlog::info("stopping on a signal");
    return true;
  } catch (const Error& e) {
    client.send_dying(e.what(), e.kind());
    throw;
  }
}

}  // namespace

int run_loader(const LoaderOptions& o, zmq::context_t& context, const std::atomic<bool>& stop) {
  RunDirectory run = RunDirectory::attach(o.run_dir);
  if (o.hold) {
    hold_for_debugger(fmt::format("loader {}", o.index), stop);
    if (stop) return 0;
  }
  const std::string path = o.arena.empty() ? run.file("arena") : o.arena;
  auto src = ModelSource::open(o.model);
  arena::BuildOptions b;
  b.worker_nodes = o.worker_nodes;
  b.repack_for = kernels::choose_isa_from_environment();
  arena::BuildStats stats;
  arena::Arena a = arena::Arena::open_or_build(path, *src, b, &stats);
  spdlog::info("arena {} ready ({:.1f} MiB, {} tensors, {} expert worker(s)): {}", a.path(),
               double(a.size()) / (1 << 20), a.tensors().size(), a.worker_nodes().size(), stats.reason);
  // The model files are no longer needed: the arena holds every weight.
  src.reset();
  if (!o.ready_file.empty()) write_pid_file(o.ready_file);
  if (o.endpoint.empty()) return 0;
  control::ClientOptions co;
  // Without --epoch, the start time orders this loader after any earlier one.
  co.identity = {proto::Role::LOADER, o.index, o.epoch ? o.epoch : uint32_t(self_process().start_ticks)};
  if (o.coordinator_file.empty()) {
    if (!o.server) fail_invalid("--control needs --server-pid or --coordinator-file (who answers it)");
    auto client = control::ControlClient::connect(context, o.endpoint, co, *o.server,
                                                  std::chrono::steady_clock::now() + std::chrono::seconds(o.handshake_seconds));
    serve(client, o.endpoint, a, stop, false);
    return 0;
  }
  // Stays while the run lives: every coordinator (a restarted one too) gets the manifest.
  const control::CoordinatorLink link{o.endpoint, o.coordinator_file, o.parent};
  for (;;) {
    std::optional<control::ControlClient> client = control::join_coordinator(context, link, co, stop);
    if (!client || serve(*client, o.endpoint, a, stop, true)) return 0;
  }
}

}  // namespace tandem::loader
