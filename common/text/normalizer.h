// Normalizers of tokenizer.json ("normalizer"), compiled once from their JSON
// and applied to each piece of input text between added tokens.
//
// Supported: Sequence, NFC, NFD, NFKC, NFKD, Replace (String or Regex pattern),
// Prepend, Strip, StripAccents. Others (Lowercase, BertNormalizer,
// Precompiled, …) are rejected with an error naming the type, never ignored.
// Semantics follow Hugging Face's tokenizers (Strip trims what JavaScript's
// trim() trims, as Hugging Face's JavaScript implementation does).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text/regex.h"

namespace tandem::text {

class Normalizer {
 public:
  // config: the "normalizer" JSON value (null: the identity). label names the
  // tokenizer in errors.
  static Normalizer compile(const nlohmann::json& config, const std::string& label);

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kReplaceString, kReplaceRegex, kPrepend, kStrip,
                    kStripAccents };
  struct Step {
    Kind kind;
    std::string a;  // Replace: pattern (string kind); Prepend: the prefix
    std::string b;  // Replace: content
    std::shared_ptr<const Regex> regex;
    bool left = false, right = false;  // Strip
  };
  void add(const nlohmann::json& config, const std::string& where, const std::string& label);
  std::vector<Step> steps_;
};

// The characters JavaScript's String.prototype.trim() removes (White_Space
// minus U+0085, plus U+FEFF): what Hugging Face's JS implementation strips for
// Strip normalizers and lstrip/rstrip added tokens.
bool is_js_trim_space(char32_t cp);
std::string_view js_trim_start(std::string_view s);
std::string_view js_trim_end(std::string_view s);

// Replaces every occurrence of the literal `from` in s with `to` (nothing
// when from is empty).
void replace_all(std::string& s, std::string_view from, std::string_view to);

// Replaces every match of re in text (UTF-8) with content.
std::string regex_replace_all(const Regex& re, std::string_view text, std::string_view content);

}  // namespace tandem::text
