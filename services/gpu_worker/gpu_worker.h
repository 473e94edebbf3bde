// The gpu worker process (host backend: everything on the CPU): the dense
// part of the model zero-copy from the weight arena — embeddings, attention
// and the KV caches, routers, shared experts, dense layers, the head and
// sampling — with routed experts sent to the expert workers over their rings
// (RemoteExperts). It joins the coordinator's control plane and runs the
// StepRequests it receives (StepRunner), on a compute thread while the main
// thread keeps heartbeating, so a long prefill is not mistaken for a hang.
// When the coordinator goes, the sequences go with it and the worker waits
// for the next coordinator; the launcher restarts a dead worker, and the
// coordinator replays its sequences into the new one.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/control/coordinator_link.h"
#include "services/gpu_worker/remote_experts.h"

namespace tandem::gpu {

struct GpuWorkerOptions {
  std::string model;   // the model's files, for its configuration
  std::string arena;   // the weights
  std::vector<ExpertLinkPaths> experts;  // one pair of rings per expert worker
  control::CoordinatorLink coordinator;
  uint32_t index = 0;
  std::string run_dir;        // where sequence transfer files may be (prefill/decode handoffs)
  std::string role = "both";  // both, prefill or decode (sent in the Hello's capabilities)
  std::string ready_file;  // once joined, this process's pid is written there
  bool hold = false;       // wait for a debugger before joining
};

int run_gpu_worker(const GpuWorkerOptions& o, zmq::context_t& context, const std::atomic<bool>& stop);

}  // namespace tandem::gpu
