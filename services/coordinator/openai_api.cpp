#include "services/coordinator/openai_api.h"

#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.h"

namespace tandem::coordinator {

using nlohmann::json;

namespace {

// A client mistake: becomes a 4xx answer with OpenAI's error shape.
struct ApiError {
  int status;
  std::string message;
  std::string param;
};

[[noreturn]] void bad(std::string message, std::string param = {}) {
  throw ApiError{400, std::move(message), std::move(param)};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_body(int status, const std::string& message, const std::string& param) {
  const char* type = status == 401 ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  json e = {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", nullptr}};
  return dump(json{{"error", e}});
}

double number(const json& body, const char* key, double lo, double hi, double fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_number()) bad(fmt::format("'{}' must be a number", key), key);
  double v = body[key].get<double>();
  if (!(v >= lo && v <= hi)) bad(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v), key);
  return v;
}

int64_t integer(const json& body, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_number_integer()) bad(fmt::format("'{}' must be an integer", key), key);
  int64_t v = body[key].get<int64_t>();
  if (v < lo || v > hi) bad(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v), key);
  return v;
}

bool boolean(const json& body, const char* key, bool fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_boolean()) bad(fmt::format("'{}' must be true or false", key), key);
  return body[key].get<bool>();
}

std::vector<int> bytes_of(const std::string& s) {
  std::vector<int> b;
  for (unsigned char c : s) b.push_back(c);
  return b;
}

// The content of a chat message: a string, or an array of text parts.
std::string message_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) bad("message content must be a string or an array of text parts", "messages");
  std::string s;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string() ||
        part["type"].get<std::string>() != "text" || !part.contains("text") || !part["text"].is_string())
      bad("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported", "messages");
    s += part["text"].get<std::string>();
  }
  return s;
}

}  // namespace

OpenAiApi::OpenAiApi(Generator& generator, std::optional<text::ChatTemplate> chat_template, ApiOptions options)
    : gen_(generator),
      template_(std::move(chat_template)),
      options_(std::move(options)),
      next_id_(uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count())) {}

std::string OpenAiApi::metrics() const {
  const GeneratorStats g = gen_.stats();
  return fmt::format(
      "# HELP tandem_requests_total Completion requests received.\n# TYPE tandem_requests_total counter\n"
      "tandem_requests_total {}\n"
      "# HELP tandem_request_errors_total Requests answered with an error.\n# TYPE tandem_request_errors_total counter\n"
      "tandem_request_errors_total {}\n"
      "# HELP tandem_requests_cancelled_total Requests whose client went away.\n# TYPE tandem_requests_cancelled_total counter\n"
      "tandem_requests_cancelled_total {}\n"
      "# HELP tandem_prompt_tokens_total Prompt tokens processed.\n# TYPE tandem_prompt_tokens_total counter\n"
      "tandem_prompt_tokens_total {}\n"
      "# HELP tandem_generation_tokens_total Tokens generated.\n# TYPE tandem_generation_tokens_total counter\n"
      "tandem_generation_tokens_total {}\n"
      "# HELP tandem_requests_running Requests in the running batch.\n# TYPE tandem_requests_running gauge\n"
      "tandem_requests_running {}\n"
      "# HELP tandem_requests_waiting Requests waiting for a place in the batch.\n# TYPE tandem_requests_waiting gauge\n"
      "tandem_requests_waiting {}\n"
      "# HELP tandem_steps_total Forward passes (each batches every running request).\n# TYPE tandem_steps_total counter\n"
      "tandem_steps_total {}\n"
      "# HELP tandem_step_tokens_total Tokens over all forward passes.\n# TYPE tandem_step_tokens_total counter\n"
      "tandem_step_tokens_total {}\n"
      "# HELP tandem_step_sequences_total Sequences over all forward passes (divided by steps: mean batch size).\n"
      "# TYPE tandem_step_sequences_total counter\n"
      "tandem_step_sequences_total {}\n"
      "# HELP tandem_step_sequences_max The largest batch of sequences in one forward pass.\n"
      "# TYPE tandem_step_sequences_max gauge\n"
      "tandem_step_sequences_max {}\n"
      "# HELP tandem_step_recoveries_total Times a step failed for a lost gpu worker or a sequence it lacked (sent again, or replayed).\n"
      "# TYPE tandem_step_recoveries_total counter\n"
      "tandem_step_recoveries_total {}\n",
      requests_.load(), errors_.load(), cancelled_.load(), prompt_tokens_.load(), completion_tokens_.load(),
      g.running, g.waiting, g.steps, g.step_tokens, g.step_sequences, g.max_step_sequences, g.recoveries) +
         (options_.more_metrics ? options_.more_metrics() : std::string());
}

void OpenAiApi::handle(const HttpRequest& req, HttpResponder& out) {
  try {
    if (req.path == "/health") {
      if (req.method != "GET") throw ApiError{405, "use GET /health", ""};
      if (options_.ready && !options_.ready()) out.send_json(503, R"({"status":"starting"})");
      else out.send_json(200, R"({"status":"ok"})");
      return;
    }
    if (!options_.api_key.empty() && req.header("authorization") != "Bearer " + options_.api_key)
      throw ApiError{401, "missing or wrong API key (send Authorization: Bearer <key>)", ""};
    if (req.path == "/metrics") {
      out.send(200, "text/plain; version=0.0.4", metrics());
    } else if (req.path == "/v1/models") {
      if (req.method != "GET") throw ApiError{405, "use GET /v1/models", ""};
      json m = {{"id", options_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "tandem"}};
      out.send_json(200, dump(json{{"object", "list"}, {"data", json::array({m})}}));
    } else if (req.path == "/v1/completions" || req.path == "/v1/chat/completions") {
      if (req.method != "POST") throw ApiError{405, "use POST " + req.path, ""};
      ++requests_;
      completions(req, out, req.path == "/v1/chat/completions");
    } else {
      throw ApiError{404, fmt::format("no route {} {}", req.method, req.path), ""};
    }
  } catch (const nlohmann::json::exception& e) {
    ++errors_;
    if (!out.answered()) out.send_json(400, error_body(400, std::string("malformed request: ") + e.what(), ""));
  } catch (const ApiError& e) {
    ++errors_;
    if (!out.answered()) out.send_json(e.status, error_body(e.status, e.message, e.param));
  } catch (const Error& e) {
    ++errors_;
    const int status = e.kind() == ErrorKind::kInvalidInput ? 400 : 500;
    if (status == 500) spdlog::error("{} {}: {}", req.method, req.path, e.what());
    if (!out.answered()) out.send_json(status, error_body(status, e.what(), ""));
    else out.event(dump(json{{"error", {{"message", e.what()}, {"type", "server_error"}}}}));
  }
}

void OpenAiApi::completions(const HttpRequest& req, HttpResponder& out, bool chat) {
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::exception& e) {
    bad(fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) bad("the body must be a JSON object");
  if (body.contains("model") && !body["model"].is_string()) bad("'model' must be a string", "model");
  if (integer(body, "n", 1, 1, 1) != 1) bad("only n = 1 is supported", "n");

  // The prompt.
  std::vector<uint32_t> prompt;
  std::string echo_text;
  const text::Tokenizer& tok = gen_.tokenizer();
  if (chat) {
    if (!template_) bad("this model has no chat template; use /v1/completions");
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
      bad("'messages' must be a non-empty array", "messages");
    text::ChatTemplateInputs in;
    for (const json& m : body["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        bad("every message needs a string 'role'", "messages");
      nlohmann::ordered_json om = {{"role", m["role"].get<std::string>()},
                                   {"content", message_text(m.value("content", json(nullptr)))}};
      in.messages.push_back(om);
    }
    in.add_generation_prompt = true;
    in.bos_token = tok.info().bos_token;
    in.eos_token = tok.info().eos_token;
    const std::string rendered = template_->render(in);
    text::EncodeOptions eo;
    eo.add_special = false;
    prompt = tok.encode(rendered, eo);
  } else {
    if (!body.contains("prompt")) bad("'prompt' is required", "prompt");
    json p = body["prompt"];
    if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
    if (p.is_string()) {
      echo_text = p.get<std::string>();
      prompt = tok.encode(echo_text);
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      for (const json& id : p) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > int64_t(UINT32_MAX))
          bad("'prompt' token ids must be non-negative 32-bit integers", "prompt");
        prompt.push_back(uint32_t(id.get<int64_t>()));
      }
      echo_text = tok.decode(prompt);
    } else {
      bad("'prompt' must be a string, an array of token ids, or an array holding one of those "
          "(several prompts in one request are not supported)", "prompt");
    }
  }
  if (prompt.empty()) bad("the prompt encodes to no tokens", chat ? "messages" : "prompt");

  GenerationParams gp;
  const int64_t room = gen_.context_length() - int64_t(prompt.size());
  if (room < 1) bad(fmt::format("the prompt ({} tokens) fills the context ({})", prompt.size(), gen_.context_length()));
  // Without a limit a chat runs to end-of-sequence, but at most 2048 tokens
  // (the KV cache is sized for the request).
  int64_t max_tokens = integer(body, "max_tokens", 1, 1 << 30, chat ? std::min<int64_t>(room, 2048) : 16);
  if (chat) max_tokens = integer(body, "max_completion_tokens", 1, 1 << 30, max_tokens);
  gp.max_tokens = int(max_tokens);
  gp.sampling.temperature = float(number(body, "temperature", 0, 2, 1.0));
  gp.sampling.top_p = float(number(body, "top_p", 0, 1, 1.0));
  if (gp.sampling.top_p <= 0) bad("'top_p' must be above 0", "top_p");
  gp.sampling.top_k = int(integer(body, "top_k", 0, 1 << 30, 0));
  gp.sampling.min_p = float(number(body, "min_p", 0, 1, 0));
  gp.sampling.repetition_penalty = float(number(body, "repetition_penalty", 0.01, 100, 1.0));
  gp.sampling.seed = uint64_t(integer(body, "seed", INT64_MIN, INT64_MAX, int64_t(next_id_.load() * 2654435761u)));
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) gp.stop.push_back(s.get<std::string>());
    else if (s.is_array() && s.size() <= 4) {
      for (const json& x : s) {
        if (!x.is_string()) bad("'stop' must be a string or up to 4 strings", "stop");
        gp.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("'stop' must be a string or up to 4 strings", "stop");
    }
    for (const std::string& x : gp.stop)
      if (x.empty()) bad("'stop' strings must not be empty", "stop");
  }
  if (chat) {
    if (boolean(body, "logprobs", false)) gp.top_logprobs = int(integer(body, "top_logprobs", 0, 20, 0));
    else if (body.contains("top_logprobs") && !body["top_logprobs"].is_null())
      bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  } else {
    gp.top_logprobs = int(integer(body, "logprobs", 0, 20, -1));
  }
  const bool echo = !chat && boolean(body, "echo", false);
  const bool stream = boolean(body, "stream", false);
  bool include_usage = false;
  if (stream && body.contains("stream_options") && body["stream_options"].is_object())
    include_usage = boolean(body["stream_options"], "include_usage", false);

  const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++);
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  const char* object = chat ? (stream ? "chat.completion.chunk" : "chat.completion")
                            : "text_completion";
  auto chunk = [&](json choice) {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", options_.model_name},
                {"choices", json::array({std::move(choice)})}};
  };
  auto logprob_entry = [&](const TokenEvent& ev) {
    json top = json::array();
    for (const TokenLogprob& t : ev.top)
      top.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes_of(t.text)}});
    return json{{"token", ev.token.text}, {"logprob", ev.token.logprob}, {"bytes", bytes_of(ev.token.text)},
                {"top_logprobs", top}};
  };
  // Completions' older logprobs shape, for events[from, to).
  auto completion_logprobs = [&](const std::vector<TokenEvent>& evs, size_t offset0) {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    size_t offset = offset0;
    for (const TokenEvent& ev : evs) {
      tokens.push_back(ev.token.text);
      lps.push_back(ev.token.logprob);
      json t = json::object();
      for (const TokenLogprob& x : ev.top) t[x.text] = x.logprob;
      tops.push_back(t);
      offsets.push_back(offset);
      offset += ev.token.text.size();
    }
    return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  };
  auto usage = [&](const GenerationResult& r) {
    return json{{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.tokens.size()},
                {"total_tokens", r.prompt_tokens + r.tokens.size()}};
  };

  gen_.check(prompt, gp);  // a 400 now, not an error event after a 200
  if (!stream) {
    GenerationResult r = gen_.generate(prompt, gp, [&](const TokenEvent&) { return !out.peer_closed(); });
    if (r.finish_reason == "cancelled") {
      ++cancelled_;
      spdlog::info("{}: the client went away after {} tokens; stopped", id, r.tokens.size());
      return;
    }
    prompt_tokens_ += r.prompt_tokens;
    completion_tokens_ += r.tokens.size();
    json choice = {{"index", 0}, {"finish_reason", r.finish_reason}, {"logprobs", nullptr}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", r.text}};
      if (gp.top_logprobs >= 0) {
        json content = json::array();
        for (const TokenEvent& ev : r.events) content.push_back(logprob_entry(ev));
        choice["logprobs"] = {{"content", content}};
      }
    } else {
      choice["text"] = echo ? echo_text + r.text : r.text;
      if (gp.top_logprobs >= 0) choice["logprobs"] = completion_logprobs(r.events, echo ? echo_text.size() : 0);
    }
    json j = chunk(choice);
    j["usage"] = usage(r);
    out.send_json(200, dump(j));
    return;
  }

  if (!out.start_events()) return;
  if (chat) {
    out.event(dump(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                          {"logprobs", nullptr}, {"finish_reason", nullptr}})));
  } else if (echo) {
    out.event(dump(chunk({{"index", 0}, {"text", echo_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}})));
  }
  size_t offset = echo ? echo_text.size() : 0;
  GenerationResult r = gen_.generate(prompt, gp, [&](const TokenEvent& ev) {
    const bool is_token = ev.token.id != UINT32_MAX;
    if (ev.delta.empty() && !(is_token && gp.top_logprobs >= 0)) return !out.client_gone();
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (chat) {
      choice["delta"] = {{"content", ev.delta}};
      if (is_token && gp.top_logprobs >= 0) choice["logprobs"] = {{"content", json::array({logprob_entry(ev)})}};
    } else {
      choice["text"] = ev.delta;
      if (is_token && gp.top_logprobs >= 0) {
        choice["logprobs"] = completion_logprobs({ev}, offset);
        offset += ev.token.text.size();
      }
    }
    return out.event(dump(chunk(choice)));
  });
  prompt_tokens_ += r.prompt_tokens;
  completion_tokens_ += r.tokens.size();
  if (r.finish_reason == "cancelled") {
    ++cancelled_;
    spdlog::info("{}: the client went away after {} tokens; stopped", id, r.tokens.size());
    return;
  }
  json last = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", r.finish_reason}};
  if (chat) last["delta"] = json::object();
  else last["text"] = "";
  out.event(dump(chunk(last)));
  if (include_usage) {
    json u = chunk(nullptr);
    u["choices"] = json::array();
    u["usage"] = usage(r);
    out.event(dump(u));
  }
  out.event("[DONE]");
}

}  // namespace tandem::coordinator
