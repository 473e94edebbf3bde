// tandem-loader: builds or adopts the weight arena of a run and serves its
// manifest. Started by the launcher; runnable by hand for debugging:
//   tandem-loader --model M.gguf --run-dir /dev/shm/tandem-$UID/run-... [--worker-nodes 0,0]
#include <atomic>
#include <csignal>
#include <iostream>
#include <string>

#include <zmq.hpp>

#include "common/error.h"
#include "common/log.h"
#include "services/loader/loader.h"

namespace {

std::atomic<bool> g_stop{false};  // set by SIGINT/SIGTERM; read by the serving loop

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

uint32_t parse_u32(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    unsigned long n = std::stoul(v, &used);
    if (used == v.size() && n <= UINT32_MAX) return uint32_t(n);
  } catch (const std::exception&) {
  }
  tandem::fail_invalid("{} '{}': expected a non-negative integer", flag, v);
}

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
    else if (a == "--index") o.index = parse_u32(a, v);
    else if (a == "--coordinator-file") o.coordinator_file = v;
    else if (a == "--ready-file") o.ready_file = v;
    else if (a == "--parent-pid") {
      o.parent = tandem::find_process(pid_t(parse_u32(a, v)));
      if (!o.parent) throw tandem::Error(tandem::ErrorKind::kPeerLost, "--parent-pid " + v + ": no such process");
    }
    else if (a == "--epoch") o.epoch = parse_u32(a, v);
    else if (a == "--server-pid") {
      o.server = tandem::find_process(pid_t(parse_u32(a, v)));
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
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  tandem::loader::LoaderOptions o;
  try {
    o = parse(argc, argv);
  } catch (const tandem::Error& e) {
    std::cerr << "tandem-loader: " << e.what() << "\n" << kUsage;
    return 2;
  }
  tandem::init_logging("loader", int(o.index));
  std::signal(SIGINT, [](int) { g_stop = true; });
  std::signal(SIGTERM, [](int) { g_stop = true; });
  zmq::context_t context;  // outlives every socket; destroyed last, flushing a Dying
  try {
    return tandem::loader::run_loader(o, context, g_stop);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
