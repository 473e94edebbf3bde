#include "launcher/text_commands.h"

#include <fstream>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/text/jinja/chat_template.h"
#include "common/text/tokenizer.h"

namespace tandem {
namespace {

nlohmann::ordered_json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kNotFound, fmt::format("{} {}: cannot open: {}", what, path, std::strerror(errno)), errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::ordered_json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail_invalid("{} {}: not valid JSON: {}", what, path, e.what());
  }
}

}  // namespace

void run_tokenize(const TokenizeOptions& o, std::ostream& out) {
  if (o.tokenizer.empty()) fail_invalid("--tokenizer PATH is required");
  if (o.text.has_value() == o.file.has_value()) fail_invalid("give exactly one of --text and --file");
  std::string text;
  if (o.text) {
    text = *o.text;
  } else {
    std::ifstream in(*o.file, std::ios::binary);
    if (!in) throw Error(ErrorKind::kNotFound, "--file " + *o.file + ": cannot open: " + std::strerror(errno), errno);
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto tok = text::Tokenizer::load(o.tokenizer);
  text::EncodeOptions eo;
  eo.add_special = o.add_special;
  eo.parse_special = o.parse_special;
  nlohmann::json j;
  j["ids"] = tok.encode(text, eo);
  out << j.dump() << "\n";
}

void run_detokenize(const DetokenizeOptions& o, std::ostream& out) {
  if (o.tokenizer.empty()) fail_invalid("--tokenizer PATH is required");
  auto tok = text::Tokenizer::load(o.tokenizer);
  text::DecodeOptions d;
  d.skip_special = o.skip_special;
  nlohmann::json j;
  j["text"] = tok.decode(o.ids, d);
  out << j.dump() << "\n";
}

void run_chat_template(const ChatTemplateOptions& o, std::ostream& out) {
  if (o.tokenizer.empty()) fail_invalid("--tokenizer PATH is required");
  if (o.messages_file.empty()) fail_invalid("--messages FILE.json is required");
  auto tok = text::Tokenizer::load(o.tokenizer);
  const auto& info = tok.info();
  if (info.chat_template.empty())
    fail(ErrorKind::kNotFound, "{}: no chat template (tokenizer_config.json chat_template or GGUF tokenizer.chat_template)", o.tokenizer);
  text::ChatTemplateInputs in;
  auto doc = read_json_file(o.messages_file, "--messages");
  if (doc.is_object() && doc.contains("messages")) {
    in.messages = doc["messages"];
    if (doc.contains("tools")) in.tools = doc["tools"];
  } else {
    in.messages = doc;
  }
  if (!in.messages.is_array()) fail_invalid("--messages {}: expected a JSON array of messages", o.messages_file);
  if (o.tools_file) in.tools = read_json_file(*o.tools_file, "--tools");
  in.add_generation_prompt = o.add_generation_prompt;
  in.bos_token = info.bos_token;
  in.eos_token = info.eos_token;
  for (const auto& [name, value] : o.vars) {
    try {
      in.extra[name] = nlohmann::ordered_json::parse(value);
    } catch (const nlohmann::json::exception&) {
      fail_invalid("--var {}={}: the value must be JSON (true, 3, \"text\", ...)", name, value);
    }
  }
  auto tmpl = text::ChatTemplate::parse(info.chat_template, o.tokenizer);
  out << tmpl.render(in);
}

}  // namespace tandem
