// Pre-tokenizers of tokenizer.json ("pre_tokenizer"), compiled once from their
// JSON: they cut one normalised piece of text into the words the model then
// encodes separately.
//
// Supported: Sequence, Split (Regex or String pattern; behaviours Isolated,
// Removed, MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel
// (add_prefix_space, use_regex with GPT-2's pattern), Metaspace (replacement,
// prepend_scheme always/first/never, split), Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer. Anything else is rejected by name.
//
// Where Hugging Face's JavaScript port simplifies (Split behaviours other than
// Isolated/Removed, invert, Metaspace's split, Punctuation and Digits), the
// Rust crate's semantics are followed, since that is what Python users get.
//
// ByteLevel maps each UTF-8 byte to its printable stand-in character (GPT-2's
// bytes_to_unicode), so words after it are in the byte-level alphabet that
// byte-level vocabularies are written in.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text/regex.h"

namespace tandem::text {

// GPT-2's byte <-> stand-in character tables.
char32_t byte_to_unicode(uint8_t b);
// The byte a stand-in stands for; false if cp is not a stand-in.
bool unicode_to_byte(char32_t cp, uint8_t* b);

class PreTokenizer {
 public:
  // config: the "pre_tokenizer" JSON value (null: the whole text is one word).
  static PreTokenizer compile(const nlohmann::json& config, const std::string& label);

  // Appends the words of text (UTF-8) to out, as UTF-8. section_index is the
  // position of this piece among the pieces between added tokens (Metaspace's
  // prepend_scheme "first" only prefixes piece 0).
  void split(std::string_view text, size_t section_index, std::vector<std::string>& out) const;

  // True if a ByteLevel step is present (the decoder and the vocabulary are
  // then in the byte-level alphabet).
  bool byte_level() const;

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> regex;  // Split (String patterns are escaped into a regex)
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::u32string replacement;     // Metaspace
    int prepend = 0;                // Metaspace: 0 always, 1 first, 2 never
    bool split = true;              // Metaspace
  };
  using Pieces = std::vector<std::u32string>;
  void add(const nlohmann::json& config, const std::string& where, const std::string& label);
  void add_split(std::string pattern_regex, Behavior b, bool invert, const std::string& where,
                 const std::string& label);
  static void run_split(const Step& s, const std::u32string& piece, Pieces& out);
  static void run_byte_level(const Step& s, const std::u32string& piece, Pieces& out);
  static void run_metaspace(const Step& s, const std::u32string& piece, size_t section,
                            Pieces& out);
  std::vector<Step> steps_;
};

}  // namespace tandem::text
