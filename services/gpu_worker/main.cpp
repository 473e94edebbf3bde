// tandem-gpu-worker: the dense part of the model (host backend) for the
// coordinator's steps, with routed experts in the expert workers. Started by
// `tandem serve`; runnable by hand for debugging:
//   tandem-gpu-worker --model M.gguf --arena RUN/arena --experts 2 --run-dir RUN
#include <atomic>
#include <string>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/error.h"
#include "common/service_main.h"
#include "services/gpu_worker/gpu_worker.h"

namespace {

const char* kUsage = R"(usage: tandem-gpu-worker --model PATH --run-dir DIR --experts N [options]
  --arena PATH       the weight arena (default: DIR/arena)
  --rings PREFIX     expert rings PREFIX-W.req and PREFIX-W.res (default: DIR/experts)
  --index N          this worker's index (default 0)
  --role ROLE        both (default), prefill or decode: what the coordinator sends it (a prefill
                     worker hands each prompt's cache to the decode worker through the run directory)
  --parent-pid PID   exit when that process is gone
  --ready-file PATH  once joined to the coordinator, write this process's pid there
  --hold             wait for a debugger before joining (prints the command to attach)
The coordinator listens at
ipc://DIR/control.sock and writes its pid to DIR/coordinator-0.ready.
)";


tandem::gpu::GpuWorkerOptions parse(int argc, char** argv) {
  tandem::gpu::GpuWorkerOptions o;
  std::string run_dir;
  int experts = 0;
  std::string rings;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--hold") {
      o.hold = true;
      continue;
    }
    if (i + 1 >= argc) tandem::fail_invalid("unknown option or missing value: '{}'", a);
    std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--run-dir") run_dir = v;
    else if (a == "--arena") o.arena = v;
    else if (a == "--rings") rings = v;
    else if (a == "--experts") experts = tandem::parse_flag_number<int>(a, v);
    else if (a == "--index") o.index = uint32_t(tandem::parse_flag_number<int>(a, v));
    else if (a == "--ready-file") o.ready_file = v;
    else if (a == "--role") {
      if (v != "both" && v != "prefill" && v != "decode")
        tandem::fail_invalid("--role {}: expected both, prefill or decode", v);
      o.role = v;
    }
    else if (a == "--parent-pid") {
      o.coordinator.parent = tandem::find_process(pid_t(tandem::parse_flag_number<int>(a, v)));
      if (!o.coordinator.parent)
        throw tandem::Error(tandem::ErrorKind::kPeerLost, "--parent-pid " + v + ": no such process");
    } else {
      tandem::fail_invalid("unknown option '{}'", a);
    }
  }
  if (o.model.empty() || run_dir.empty() || experts < 1)
    tandem::fail_invalid("--model, --run-dir and --experts (at least 1) are required");
  if (o.arena.empty()) o.arena = run_dir + "/arena";
  if (rings.empty()) rings = run_dir + "/experts";
  for (int w = 0; w < experts; ++w)
    o.experts.push_back({fmt::format("{}-{}.req", rings, w), fmt::format("{}-{}.res", rings, w)});
  o.run_dir = run_dir;
  o.coordinator.endpoint = "ipc://" + run_dir + "/control.sock";
  o.coordinator.pid_file = run_dir + "/coordinator-0.ready";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return tandem::service_main(
      argc, argv, "tandem-gpu-worker", kUsage, parse,
      [](const auto& o) { return std::pair<std::string, int>("gpu", int(o.index)); },
      [](const auto& o, const std::atomic<bool>& stop) {
        zmq::context_t context;  // outlives every socket; destroyed last, flushing a Dying
        return tandem::gpu::run_gpu_worker(o, context, stop);
      });
}
