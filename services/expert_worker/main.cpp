// tandem-expert-worker: computes routed experts on one slice of the weight
// arena for a requester that talks to it over two rings. Started by the
// launcher; runnable by hand for debugging:
//   tandem-expert-worker --arena RUN/arena --worker 0 --requests RUN/experts-0.req
//       --responses RUN/experts-0.res --top-k 8 [--threads N] [--cpus 0-3]
// (--requests/--responses once per requester, in pairs).
#include <atomic>
#include <string>

#include "common/error.h"
#include "common/service_main.h"
#include "kernels/cpu/cpu_isa.h"
#include "services/expert_worker/expert_worker.h"

namespace {

const char* kUsage = R"(usage: tandem-expert-worker --arena PATH --worker N --requests RING --responses RING --top-k K [options]
  --requests RING --responses RING   once per requester (a prefill and a decode gpu worker: twice)
  --threads N        compute threads (default 1)
  --cpus LIST        pin them, e.g. 0-3,8 (default: not pinned)
  --parent-pid PID   exit when that process is gone
  --ready-file PATH  once serving, write this process's pid there
  --hold             wait for a debugger before serving (prints the command to attach)
The rings are created by the requester; TANDEM_CPU_ISA forces a kernel level.
)";


tandem::expert::WorkerOptions parse(int argc, char** argv) {
  tandem::expert::WorkerOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--hold") {
      o.hold = true;
      continue;
    }
    if (i + 1 >= argc) tandem::fail_invalid("unknown option or missing value: '{}'", a);
    std::string v = argv[++i];
    if (a == "--arena") o.arena = v;
    else if (a == "--worker") o.worker = tandem::parse_flag_number<int>(a, v);
    else if (a == "--requests") o.links.push_back({v, ""});
    else if (a == "--responses") {
      if (o.links.empty() || !o.links.back().responses.empty())
        tandem::fail_invalid("--responses {} must follow its --requests", v);
      o.links.back().responses = v;
    }
    else if (a == "--top-k") o.top_k = tandem::parse_flag_number<int>(a, v);
    else if (a == "--threads") o.threads = tandem::parse_flag_number<int>(a, v);
    else if (a == "--ready-file") o.ready_file = v;
    else if (a == "--cpus") o.cpus = tandem::expert::parse_cpu_list(v);
    else if (a == "--parent-pid") {
      o.parent = tandem::find_process(pid_t(tandem::parse_flag_number<int>(a, v)));
      if (!o.parent) throw tandem::Error(tandem::ErrorKind::kPeerLost, "--parent-pid " + v + ": no such process");
    } else {
      tandem::fail_invalid("unknown option '{}'", a);
    }
  }
  if (o.arena.empty() || o.links.empty() || o.top_k < 1)
    tandem::fail_invalid("--arena, --requests, --responses and --top-k are required");
  for (const auto& l : o.links)
    if (l.responses.empty()) tandem::fail_invalid("--requests {} has no --responses after it", l.requests);
  if (o.threads < 1) tandem::fail_invalid("--threads must be at least 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return tandem::service_main(
      argc, argv, "tandem-expert-worker", kUsage, parse,
      [](const auto& o) { return std::pair<std::string, int>("expert", o.worker); },
      [](const auto& o, const std::atomic<bool>& stop) {
        return tandem::expert::run_expert_worker(o, tandem::kernels::choose_isa_from_environment(), stop);
      });
}
