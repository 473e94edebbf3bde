// The OpenAI-compatible HTTP API over a Generator: POST /v1/completions and
// /v1/chat/completions (streaming as server-sent events, or not), GET
// /v1/models, /health and /metrics (Prometheus text). Errors use OpenAI's
// JSON shape {"error": {"message", "type", "param", "code"}} with 4xx/5xx
// statuses. With an API key set, every route but /health needs
// "Authorization: Bearer <key>".
#pragma once

#include <functional>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "common/text/jinja/chat_template.h"
#include "services/coordinator/generator.h"
#include "services/coordinator/http_server.h"

namespace tandem::coordinator {

struct ApiOptions {
  std::string model_name = "tandem";
  std::string api_key;  // empty: no authentication
  // /health answers 503 "starting" while this says false (no gpu worker yet).
  std::function<bool()> ready;
  // Appended to /metrics (Prometheus text), e.g. the split roles' handoffs.
  std::function<std::string()> more_metrics;
};

class OpenAiApi {
 public:
  // chat_template: nullopt when the model has none (chat requests then 400).
  OpenAiApi(Generator& generator, std::optional<text::ChatTemplate> chat_template, ApiOptions options);
  void handle(const HttpRequest& request, HttpResponder& out);

 private:
  void completions(const HttpRequest& request, HttpResponder& out, bool chat);
  std::string metrics() const;

  Generator& gen_;
  std::optional<text::ChatTemplate> template_;
  ApiOptions options_;
  // Completion ids count from the start time in microseconds, so a
  // restarted coordinator does not hand out its predecessor's ids again.
  std::atomic<uint64_t> next_id_;
  std::atomic<uint64_t> requests_{0}, errors_{0}, prompt_tokens_{0}, completion_tokens_{0};
  std::atomic<uint64_t> cancelled_{0};
};

}  // namespace tandem::coordinator
