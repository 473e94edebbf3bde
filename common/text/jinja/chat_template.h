// Chat templates: the Jinja templates in a model's tokenizer_config.json that
// turn a conversation into the prompt text, rendered byte for byte as
// Hugging Face's JavaScript implementation (@huggingface/jinja, used by
// transformers.js) renders them. The engine is a Jinja subset written for
// that purpose (see parser.h and builtins.h for what it covers); anything
// outside it fails with a tandem::Error naming the template, the line, the
// column and the construct, e.g.
//   chat template 'qwen3': line 12 col 5: unsupported filter 'wordcount'
// and raise_exception('...') in a template fails with the template's message.
//
//   auto tmpl = ChatTemplate::parse(config["chat_template"].get<std::string>(), "qwen3");
//   ChatTemplateInputs inputs;
//   inputs.messages = messages;
//   inputs.add_generation_prompt = true;
//   std::string prompt = tmpl.render(inputs);
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/text/jinja/interpreter.h"

namespace tandem::text {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null when absent (the template sees none)
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  // Other variables by name, e.g. {"enable_thinking": false}; a name that
  // clashes with the ones above or with a global (true, range, ...) is an error.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

using ChatTemplateLimits = jinja::RenderLimits;

// A parsed template; cheap to copy (the parsed form is shared and immutable),
// safe to render from several threads at once.
class ChatTemplate {
 public:
  // Throws tandem::Error (kInvalidInput for syntax errors, kUnsupported for
  // statements the engine does not have) naming label, line and column.
  static ChatTemplate parse(std::string_view source, std::string label, const ChatTemplateLimits& limits = {});

  // Throws tandem::Error naming label, line and column: kUnsupported for a
  // filter, test, method or function the engine does not have, kInvalidInput
  // for everything else (type errors, raise_exception, limits).
  std::string render(const ChatTemplateInputs& inputs) const;

  const std::string& label() const;

 private:
  struct Parsed;
  explicit ChatTemplate(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::string render_checked(const ChatTemplateInputs& inputs) const;
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace tandem::text
