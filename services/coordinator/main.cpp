// tandem-coordinator: the HTTP API and the scheduler of a run; the gpu
// worker runs its steps. Started by `tandem serve`; runnable by hand:
//   tandem-coordinator --model M.gguf --run-dir RUN [--port 8080]
#include <atomic>
#include <csignal>
#include <fstream>
#include <string>

#include <zmq.hpp>

#include "common/error.h"
#include "common/service_main.h"
#include "services/coordinator/service.h"

namespace {

const char* kUsage = R"(usage: tandem-coordinator --model PATH --run-dir DIR [options]
  --host ADDR        listen address (default 127.0.0.1)
  --port N           listen port (default 8080)
  --listen-fd FD     serve on this inherited listening socket instead
  --api-key KEY      require "Authorization: Bearer KEY" (TANDEM_API_KEY also sets it)
  --api-key-file F   the same, read from F (how the launcher passes it)
  --model-name NAME  what /v1/models reports (default tandem)
  --parent-pid PID   stop when that process is gone
  --split-roles      gpu worker 1 prefills and hands each prompt's cache to gpu worker 0, which
                     decodes (default: gpu worker 0 does both)
  --hold             wait for a debugger before serving (prints the command to attach)
)";


tandem::coordinator::CoordinatorOptions parse(int argc, char** argv) {
  tandem::coordinator::CoordinatorOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--hold") {
      o.hold = true;
      continue;
    }
    if (a == "--split-roles") {
      o.split_roles = true;
      continue;
    }
    if (i + 1 >= argc) tandem::fail_invalid("unknown option or missing value: '{}'", a);
    std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--run-dir") o.run_dir = v;
    else if (a == "--host") o.host = v;
    else if (a == "--port") o.port = tandem::parse_flag_number<int>(a, v);
    else if (a == "--listen-fd") o.listen_fd = tandem::parse_flag_number<int>(a, v);
    else if (a == "--api-key") o.api_key = v;
    else if (a == "--api-key-file") {
      std::ifstream in(v);
      if (!in || !std::getline(in, o.api_key) || o.api_key.empty())
        tandem::fail_invalid("--api-key-file {}: cannot read a key from it", v);
    }
    else if (a == "--model-name") o.model_name = v;
    else if (a == "--parent-pid") {
      o.parent = tandem::find_process(pid_t(tandem::parse_flag_number<int>(a, v)));
      if (!o.parent) throw tandem::Error(tandem::ErrorKind::kPeerLost, "--parent-pid " + v + ": no such process");
    } else {
      tandem::fail_invalid("unknown option '{}'", a);
    }
  }
  if (o.model.empty() || o.run_dir.empty()) tandem::fail_invalid("--model and --run-dir are required");
  if (o.port > 65535) tandem::fail_invalid("--port must be 0..65535");
  if (o.api_key.empty())
    if (const char* k = std::getenv("TANDEM_API_KEY")) o.api_key = k;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return tandem::service_main(
      argc, argv, "tandem-coordinator", kUsage, parse,
      [](const auto&) { return std::pair<std::string, int>("coordinator", 0); },
      [](const auto& o, const std::atomic<bool>& stop) {
        std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-answer is an error return, not a signal
        zmq::context_t context;         // outlives every socket
        return tandem::coordinator::run_coordinator(o, context, stop);
      });
}
