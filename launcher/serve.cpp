#include "launcher/serve.h"

#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/text/jinja/chat_template.h"
#include "common/text/tokenizer.h"
#include "services/coordinator/generator.h"
#include "services/coordinator/http_server.h"
#include "services/coordinator/openai_api.h"

namespace tandem {

int run_serve(const ServeOptions& o, const std::atomic<bool>& stop) {
  coordinator::HttpServerOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  // Bind first: a busy port is reported before minutes of loading.
  auto server = coordinator::HttpServer::listen(ho);
  LoadedModel model(o.model, o.engine);
  auto tok = text::Tokenizer::load(o.model);
  std::optional<text::ChatTemplate> tmpl;
  if (!tok.info().chat_template.empty()) tmpl = text::ChatTemplate::parse(tok.info().chat_template, o.model);
  else spdlog::warn("{} has no chat template: /v1/chat/completions will answer 400", o.model);
  coordinator::Generator gen(*model, tok);
  coordinator::ApiOptions ao;
  ao.api_key = o.api_key;
  if (ao.api_key.empty())
    if (const char* k = std::getenv("TANDEM_API_KEY")) ao.api_key = k;
  ao.model_name = o.model_name.empty() ? std::filesystem::path(o.model).filename().string() : o.model_name;
  if (ao.model_name.empty()) ao.model_name = "tandem";
  coordinator::OpenAiApi api(gen, std::move(tmpl), ao);
  spdlog::info("listening on http://{}:{} (model '{}'{}); stop with Ctrl-C", o.host, server.port(),
               ao.model_name, ao.api_key.empty() ? "" : ", API key required");
  server.serve([&](const coordinator::HttpRequest& r, coordinator::HttpResponder& out) { api.handle(r, out); },
               stop);
  spdlog::info("stopped after {} requests", gen.requests_served());
  return 0;
}

}  // namespace tandem
