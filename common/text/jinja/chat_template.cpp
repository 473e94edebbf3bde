#include "common/text/jinja/chat_template.h"

#include "common/text/jinja/ast.h"
#include "common/text/jinja/builtins.h"
#include "common/text/jinja/json.h"
#include "common/text/jinja/lexer.h"
#include "common/text/jinja/parser.h"

namespace tandem::text {

struct ChatTemplate::Parsed {
  jinja::SourceInfo source;
  std::vector<jinja::Stmt> program;
  ChatTemplateLimits limits;
};

ChatTemplate ChatTemplate::parse(std::string_view source, std::string label, const ChatTemplateLimits& limits) {
  if (source.size() > (size_t{1} << 24)) {
    fail_invalid("chat template '{}': {} bytes is too large (at most 16 MiB)", label, source.size());
  }
  auto parsed = std::make_shared<Parsed>(Parsed{jinja::SourceInfo(std::move(label), std::string(source)), {}, limits});
  parsed->program = jinja::parse(jinja::tokenize(parsed->source), parsed->source);
  return ChatTemplate(std::move(parsed));
}

const std::string& ChatTemplate::label() const { return parsed_->source.label(); }

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  try {
    return render_checked(inputs);
  } catch (const jinja::EvalError& e) {
    // Only reachable outside any template node (inputs); nodes add positions.
    throw Error(e.kind, fmt::format("chat template '{}': {}", parsed_->source.label(), e.message));
  }
}

std::string ChatTemplate::render_checked(const ChatTemplateInputs& inputs) const {
  const std::string& label = parsed_->source.label();
  auto globals = std::make_shared<jinja::Env>(nullptr);
  jinja::install_globals(*globals);
  auto what = [&](std::string_view name) { return fmt::format("chat template '{}': {}", label, name); };
  if (!inputs.messages.is_array()) fail_invalid("{} must be a list", what("messages"));
  globals->set("messages", jinja::from_json(inputs.messages, what("messages")));
  globals->set("tools", jinja::from_json(inputs.tools, what("tools")));
  globals->set("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
  globals->set("bos_token", jinja::Value(inputs.bos_token));
  globals->set("eos_token", jinja::Value(inputs.eos_token));
  if (!inputs.extra.is_null()) {
    if (!inputs.extra.is_object()) fail_invalid("{} must be an object of variables", what("extra"));
    for (const auto& [name, value] : inputs.extra.items()) {
      if (globals->vars.count(name)) {
        fail_invalid("chat template '{}': variable '{}' is already defined", label, name);
      }
      globals->set(name, jinja::from_json(value, what(name)));
    }
  }
  jinja::Interpreter interpreter(parsed_->source, parsed_->limits);
  return interpreter.render(parsed_->program, globals);
}

}  // namespace tandem::text
