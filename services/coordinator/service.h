// The coordinator process: the OpenAI-compatible HTTP API, the tokenizer and
// chat template, and the scheduler (generator.h), whose steps run in the gpu
// worker process over the control plane (remote_stepper.h) — or in two, a
// prefill and a decode worker (split_stepper.h). It binds the
// run's control socket (the ROUTER every other process joins), asks the
// loader for the arena's manifest when it joins, and writes its pid to
// <run>/coordinator-0.ready so that the others find it — also after the
// launcher restarted it.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "common/shm/process.h"

namespace tandem::coordinator {

struct CoordinatorOptions {
  std::string model;    // tokenizer, chat template and configuration
  std::string run_dir;
  std::string host = "127.0.0.1";
  int port = 8080;
  int listen_fd = -1;   // a listening socket from the launcher (then host/port are not used)
  std::string api_key;
  std::string model_name = "tandem";
  std::optional<ProcessId> parent;  // stop when it is gone
  bool hold = false;    // wait for a debugger before serving
  // gpu worker 1 prefills, gpu worker 0 decodes (split_stepper.h); else gpu
  // worker 0 does both.
  bool split_roles = false;
};

int run_coordinator(const CoordinatorOptions& o, zmq::context_t& context, const std::atomic<bool>& stop);

}  // namespace tandem::coordinator
