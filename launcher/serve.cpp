#include "launcher/serve.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/model/model_source.h"
#include "common/shm/process.h"
#include "common/text/jinja/chat_template.h"
#include "common/text/tokenizer.h"
#include "services/coordinator/generator.h"
#include "services/coordinator/http_server.h"
#include "services/coordinator/openai_api.h"
#include "services/gpu_worker/step_runner.h"
#include "launcher/scale.h"

namespace tandem {
namespace {

std::string model_name_of(const ServeOptions& o) {
  std::string n = o.model_name.empty() ? std::filesystem::path(o.model).filename().string() : o.model_name;
  return n.empty() ? "tandem" : n;
}

// Everything in this process: --single-process, or a model without routed
// experts.
int serve_here(const ServeOptions& o, coordinator::HttpServer server, const std::atomic<bool>& stop) {
  LoadedModel model(o.model, o.engine);
  auto tok = text::Tokenizer::load(o.model);
  std::optional<text::ChatTemplate> tmpl;
  if (!tok.info().chat_template.empty()) tmpl = text::ChatTemplate::parse(tok.info().chat_template, o.model);
  else spdlog::warn("{} has no chat template: /v1/chat/completions will answer 400", o.model);
  gpu::StepRunner runner(*model);
  coordinator::Generator gen(runner, tok);
  coordinator::ApiOptions ao;
  ao.api_key = o.api_key;
  if (ao.api_key.empty())
    if (const char* k = std::getenv("TANDEM_API_KEY")) ao.api_key = k;
  ao.model_name = model_name_of(o);
  coordinator::OpenAiApi api(gen, std::move(tmpl), ao);
  spdlog::info("listening on http://{}:{} (model '{}'{}); stop with Ctrl-C", o.host, server.port(),
               ao.model_name, ao.api_key.empty() ? "" : ", API key required");
  server.serve([&](const coordinator::HttpRequest& r, coordinator::HttpResponder& out) { api.handle(r, out); },
               stop);
  spdlog::info("stopped after {} requests", gen.requests_served());
  return 0;
}

}  // namespace

int run_serve(const ServeOptions& o, const std::atomic<bool>& stop) {
  coordinator::HttpServerOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  // Bind first: a busy port is reported before minutes of loading.
  auto server = coordinator::HttpServer::listen(ho);
  if (o.engine.single_process || ModelSource::open(o.model)->config().moe.n_experts == 0)
    return serve_here(o, std::move(server), stop);

  // The process graph: loader, expert workers, then the coordinator and the
  // gpu worker, each its own supervised process.
  ExpertGraphOptions g;
  g.model = o.model;
  g.expert_workers = o.engine.expert_workers;
  g.hold = o.engine.hold;
  g.command = "serve";
  g.in_process_requester = false;
  g.loader_serves = true;
  g.service_roles = {"gpu", "coordinator"};
  if (o.split_roles) {
    g.requesters = 2;  // each gpu worker has its own rings to every expert worker
    g.service_roles.push_back("gpu:1");
  }
  g.stop = &stop;
  ExpertGraph graph(g);
  // The coordinator (only) inherits the listening socket, so a restarted one
  // serves the same port and connections made in between wait in the
  // backlog. The API key goes in a file private to the user, not on a
  // command line or in an environment others may read.
  const int fd = ::fcntl(server.fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) throw Error(ErrorKind::kSystem, "dup of the listening socket", errno);
  const std::string run = graph.run_dir();
  const std::string parent = std::to_string(::getpid());
  std::vector<std::string> coord = {graph.binary("tandem-coordinator"), "--model", o.model, "--run-dir", run,
                                    "--listen-fd", std::to_string(fd), "--host", o.host, "--model-name",
                                    model_name_of(o), "--parent-pid", parent};
  std::string key = o.api_key;
  if (key.empty())
    if (const char* k = std::getenv("TANDEM_API_KEY")) key = k;
  if (!key.empty()) {
    const std::string key_file = graph.run().file("api-key");
    write_private_file(key_file, key);
    coord.insert(coord.end(), {"--api-key-file", key_file});
  }
  using namespace std::chrono;
  if (o.split_roles) coord.push_back("--split-roles");
  // A stop that comes while one service starts ends the start there: the
  // next is not spawned (its wait would report the stop as a failed start).
  const auto start = [&](ServiceSpec spec, seconds timeout) {
    if (stop.load()) return false;
    graph.add_service(std::move(spec), timeout);
    return true;
  };
  const bool started =
      start({"coordinator", 0, coord, run + "/coordinator-0.ready", "HTTP API, tokenizer, scheduler", fd},
            seconds(120)) &&
      (o.split_roles ? start(graph.gpu_worker_spec(0, "decode"), seconds(600)) &&
                           start(graph.gpu_worker_spec(1, "prefill"), seconds(600))
                     : start(graph.gpu_worker_spec(), seconds(600)));
  if (!started) {
    spdlog::info("stopping the graph before all its services started");
    return 0;
  }
  spdlog::info("listening on http://{}:{} (model '{}'{}); run {}; stop with Ctrl-C or `tandem stop`", o.host,
               server.port(), model_name_of(o), key.empty() ? "" : ", API key required", run);
  // `tandem scale` leaves its request in the run directory (scale.h).
  while (!stop.load()) {
    std::this_thread::sleep_for(milliseconds(100));
    serve_scale_request(graph);
    if (auto failed = graph.failed_process()) {
      // Without it nothing can be answered: stop rather than hold the port.
      spdlog::error("{} keeps dying; stopping the graph", *failed);
      return 1;
    }
  }
  spdlog::info("stopping the graph");
  return 0;
}

}  // namespace tandem
