// `tandem tokenize`, `tandem detokenize` and `tandem chat-template`: the
// tokenizer and chat templates of a model, from the command line.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

struct TokenizeOptions {
  std::string tokenizer;  // HF directory, tokenizer.json or GGUF
  std::optional<std::string> text, file;
  bool add_special = true;
  bool parse_special = true;
};
// Prints {"ids": [...]}.
void run_tokenize(const TokenizeOptions& o, std::ostream& out);

struct DetokenizeOptions {
  std::string tokenizer;
  std::vector<uint32_t> ids;
  bool skip_special = false;
};
// Prints {"text": "..."}.
void run_detokenize(const DetokenizeOptions& o, std::ostream& out);

struct ChatTemplateOptions {
  std::string tokenizer;
  std::string messages_file;  // a JSON array of messages, or {"messages": [...], "tools": [...]}
  std::optional<std::string> tools_file;
  bool add_generation_prompt = false;
  std::vector<std::pair<std::string, std::string>> vars;  // name, JSON value
};
// Prints the rendered prompt exactly (no trailing newline added).
void run_chat_template(const ChatTemplateOptions& o, std::ostream& out);

}  // namespace tandem
