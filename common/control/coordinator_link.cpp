#include "common/control/coordinator_link.h"

#include <chrono>
#include <fstream>
#include <thread>

#include <spdlog/spdlog.h>

namespace tandem::control {

std::optional<ControlClient> join_coordinator(zmq::context_t& context, const CoordinatorLink& link,
                                              const ClientOptions& options, const std::atomic<bool>& stop) {
  using namespace std::chrono;
  while (!stop.load()) {
    if (link.parent && !is_alive(*link.parent)) {
      spdlog::info("the process that started this one is gone");
      return std::nullopt;
    }
    pid_t pid = 0;
    std::ifstream(link.pid_file) >> pid;
    std::optional<ProcessId> server = pid > 0 ? find_process(pid) : std::nullopt;
    if (!server) {
      std::this_thread::sleep_for(milliseconds(50));
      continue;
    }
    try {
      ControlClient c = ControlClient::connect(context, link.endpoint, options, *server, steady_clock::now() + seconds(5));
      spdlog::info("joined the coordinator (pid {}) at {}", pid, link.endpoint);
      return c;
    } catch (const Error& e) {
      spdlog::warn("joining the coordinator (pid {}) at {}: {}", pid, link.endpoint, e.what());
      std::this_thread::sleep_for(milliseconds(200));
    }
  }
  return std::nullopt;
}

}  // namespace tandem::control
