// tandem-loader: builds or adopts the weight arena of a run and serves its
// manifest. Started by the launcher; runnable by hand for debugging:
//   tandem-loader --model M.gguf --run-dir /dev/shm/tandem-$UID/run-... [--worker-nodes 0,0]
#include <atomic>
#include <string>

#include <zmq.hpp>

#include "common/error.h"
#include "common/service_main.h"
#include "services/loader/loader.h"

namespace {

const char* kUsage = R"(usage: tandem-loader --model PATH --run-dir DIR [options]
  --arena PATH          the arena file (default: DIR/arena)
  --worker-nodes LIST   NUMA node of each expert worker, e.g. 0,0,1 (default 0)
  --control ENDPOINT    serve manifest requests there (ipc://DIR/control.sock)
  --server-pid PID      the process answering ENDPOINT
  --coordinator-file F  or: its pid is in F; join every coordinator that writes it
  --parent-pid PID      with --coordinator-file: exit when that process is gone
  --ready-file PATH     once the arena is ready, write this process's pid there
  --index N --epoch E   this loader's identity (loader/N/E)
  --hold                wait for a debugger first (prints the command to attach)
Without --control the loader builds or adopts the arena and exits.
)";


tandem::loader::LoaderOptions parse(int argc, char** argv) {
  tandem::loader::LoaderOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--hold") {
      o.hold = true;
      continue;
    }
    if (i + 1 >= argc) tandem::fail_invalid("unknown option or missing value: '{}'", a);
    std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--run-dir") o.run_dir = v;
    else if (a == "--arena") o.arena = v;
    else if (a == "--worker-nodes") o.worker_nodes = tandem::loader::parse_worker_nodes(v);
    else if (a == "--control") o.endpoint = v;
    else if (a == "--index") o.index = tandem::parse_flag_number<uint32_t>(a, v);
    else if (a == "--coordinator-file") o.coordinator_file = v;
    else if (a == "--ready-file") o.ready_file = v;
    else if (a == "--parent-pid") {
      o.parent = tandem::find_process(pid_t(tandem::parse_flag_number<uint32_t>(a, v)));
      if (!o.parent) throw tandem::Error(tandem::ErrorKind::kPeerLost, "--parent-pid " + v + ": no such process");
    }
    else if (a == "--epoch") o.epoch = tandem::parse_flag_number<uint32_t>(a, v);
    else if (a == "--server-pid") {
      o.server = tandem::find_process(pid_t(tandem::parse_flag_number<uint32_t>(a, v)));
      if (!o.server) throw tandem::Error(tandem::ErrorKind::kPeerLost, "--server-pid " + v + ": no such process");
    } else {
      tandem::fail_invalid("unknown option '{}'", a);
    }
  }
  if (o.model.empty() || o.run_dir.empty()) tandem::fail_invalid("--model and --run-dir are required");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return tandem::service_main(
      argc, argv, "tandem-loader", kUsage, parse,
      [](const auto& o) { return std::pair<std::string, int>("loader", int(o.index)); },
      [](const auto& o, const std::atomic<bool>& stop) {
        zmq::context_t context;  // outlives every socket; destroyed last, flushing a Dying
        return tandem::loader::run_loader(o, context, stop);
      });
}
