#include "services/coordinator/service.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include "common/control/server.h"
#include "common/debug_hold.h"
#include "common/error.h"
#include "common/model/model_source.h"
#include "common/shm/run_dir.h"
#include "common/text/jinja/chat_template.h"
#include "common/text/tokenizer.h"
#include "services/coordinator/generator.h"
#include "services/coordinator/http_server.h"
#include "services/coordinator/openai_api.h"
#include "services/coordinator/remote_stepper.h"
#include "services/coordinator/split_stepper.h"

namespace tandem::coordinator {

using namespace std::chrono;

int run_coordinator(const CoordinatorOptions& o, zmq::context_t& context, const std::atomic<bool>& stop) {
  RunDirectory run = RunDirectory::attach(o.run_dir);
  HttpServerOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  HttpServer http = o.listen_fd >= 0 ? HttpServer::adopt(o.listen_fd, ho) : HttpServer::listen(ho);
  auto tok = text::Tokenizer::load(o.model);
  std::optional<text::ChatTemplate> tmpl;
  if (!tok.info().chat_template.empty()) tmpl = text::ChatTemplate::parse(tok.info().chat_template, o.model);
  else spdlog::warn("{} has no chat template: /v1/chat/completions will answer 400", o.model);
  const ModelConfig config = ModelSource::open(o.model)->config();
  if (o.hold) {
    hold_for_debugger("coordinator 0", stop);
    if (stop) return 0;
  }
  // One coordinator per run: a socket left here is a killed predecessor's
  // (the launcher restarts this process only after the old one is gone).
  const std::string sock = run.file("control.sock");
  if (std::filesystem::exists(sock)) {
    spdlog::info("removing {} left by the previous coordinator", sock);
    std::filesystem::remove(sock);
  }
  control::ControlServer server = control::ControlServer::bind(context, run);
  // The loader serves the arena's manifest; asked once it joins.
  auto on_other = [&server](control::ServerEvent& ev) {
    using K = control::ServerEvent::Kind;
    if (ev.kind == K::kJoined && ev.peer.role == proto::Role::LOADER) {
      capnp::MallocMessageBuilder b;
      b.initRoot<proto::Envelope>().initManifestRequest();
      server.send_request(ev.peer, b);
    } else if (ev.kind == K::kMessage && ev.message->envelope().which() == proto::Envelope::MANIFEST_REPLY) {
      auto m = ev.message->envelope().getManifestReply();
      spdlog::info("loader {}: arena {} ({:.1f} MiB, manifest version {})", control::to_string(ev.peer),
                   m.getArenaPath().cStr(), double(m.getArenaSize()) / (1 << 20), m.getManifestVersion());
    } else if (ev.kind == K::kLost || ev.kind == K::kDying) {
      spdlog::warn("{} {}: {}", control::to_string(ev.peer), control::to_string(ev.kind), ev.reason);
    }
  };
  // gpu worker 0 does everything, or decodes while gpu worker 1 prefills.
  RemoteStepper decode(server, config, 0, on_other);
  std::optional<RemoteStepper> prefill;
  std::optional<SplitStepper> split;
  if (o.split_roles) {
    prefill.emplace(server, config, 1);
    decode.set_other([&](control::ServerEvent& ev) {
      if (!prefill->accept(ev)) on_other(ev);
    });
    prefill->set_other([&](control::ServerEvent& ev) {
      if (!decode.accept(ev)) on_other(ev);
    });
    split.emplace(*prefill, decode, run.path());
    spdlog::info("split roles: gpu worker 1 prefills, gpu worker 0 decodes");
  }
  gpu::Stepper& stepper = split ? static_cast<gpu::Stepper&>(*split) : decode;
  Generator gen(stepper, tok);
  ApiOptions ao;
  ao.api_key = o.api_key;
  ao.model_name = o.model_name;
  ao.ready = [&] { return decode.has_worker() && (!prefill || prefill->has_worker()); };
  if (split)
    ao.more_metrics = [&] {
      return fmt::format(
          "# HELP tandem_sequence_handoffs_total Prompts handed from the prefill to the decode gpu worker.\n"
          "# TYPE tandem_sequence_handoffs_total counter\ntandem_sequence_handoffs_total {}\n",
          split->handoffs());
    };
  OpenAiApi api(gen, std::move(tmpl), ao);
  write_pid_file(run.file("coordinator-0.ready"));
  spdlog::info("listening on http://{}:{} (model '{}'{}); control plane at {}", o.host, http.port(), ao.model_name,
               ao.api_key.empty() ? "" : ", API key required", server.endpoint());
  // Stops with the launcher as well as on a signal.
  std::atomic<bool> done{false};
  std::jthread watch([&](std::stop_token st) {
    while (!st.stop_requested() && !stop.load() && !(o.parent && !is_alive(*o.parent)))
      std::this_thread::sleep_for(milliseconds(100));
    gen.shutdown();  // requests in flight end with an error, so the server can finish
    done = true;
  });
  http.serve([&](const HttpRequest& r, HttpResponder& out) { api.handle(r, out); }, done);
  spdlog::info("stopped after {} requests", gen.requests_served());
  return 0;
}

}  // namespace tandem::coordinator
