#include "launcher/text_commands.h"

#include <fstream>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/text/tokenizer.h"

namespace tandem {

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

}  // namespace tandem
