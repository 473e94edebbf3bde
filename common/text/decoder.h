// Decoders of tokenizer.json ("decoder"): turn a sequence of token texts back
// into text. Compiled once from their JSON.
//
// Supported: Sequence, ByteLevel, ByteFallback, Fuse, Strip, Replace (String or
// Regex), Metaspace, WordPiece, BPEDecoder. Others are rejected by name.
//
// The result is raw bytes: byte-level and byte-fallback tokens may end in the
// middle of a UTF-8 character, which a streaming caller must hold back (see
// StreamDecoder in tokenizer.h); Tokenizer::decode replaces what is still
// invalid with U+FFFD as Hugging Face does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text/regex.h"

namespace tandem::text {

struct DecodePiece {
  std::string text;
  bool added = false;  // an added token: ByteLevel passes it through unmapped
};

class Decoder {
 public:
  // config: the "decoder" JSON value (null: tokens joined with spaces, as
  // Hugging Face's JavaScript implementation does).
  static Decoder compile(const nlohmann::json& config, const std::string& label);

  std::string decode(std::vector<DecodePiece> pieces) const;

 private:
  enum class Kind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace, kMetaspace, kWordPiece,
                    kBpe };
  struct Step {
    Kind kind;
    std::string a, b;  // Replace: literal pattern / content; Strip: content;
                       // Metaspace: replacement; WordPiece: prefix; BPE: suffix
    std::shared_ptr<const Regex> regex;  // Replace with a Regex pattern
    size_t start = 0, stop = 0;          // Strip
    bool flag = false;  // WordPiece: cleanup; Metaspace: strip the first space
  };
  void add(const nlohmann::json& config, const std::string& where, const std::string& label);
  bool null_ = true;
  std::vector<Step> steps_;
};

// Hugging Face's clean_up_tokenization: " ." -> "." and the like.
std::string clean_up_tokenization(std::string_view text);

}  // namespace tandem::text
