// The tokenizer: Hugging Face's pipeline (added tokens split out, normalizer,
// pre-tokenizer, BPE model, post-processor; decoder for the way back), built
// from a tokenizer.json (+ tokenizer_config.json) or from a GGUF file's
// tokenizer.ggml.* metadata.
//
// Behaviour follows Hugging Face's tokenizers as its JavaScript implementation
// (@huggingface/tokenizers) runs them, which the parity tests compare against:
// encode(text) adds special tokens as the post-processor says and recognises
// added-token text in the input; decode cleans up tokenization spaces as
// tokenizer_config.json says (default on). Input that is not valid UTF-8 is
// read as a browser's TextDecoder reads it (each bad sequence -> U+FFFD).
//
// Not thread-safe (the BPE cache is shared); use one Tokenizer per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text/tokenizer_json.h"

namespace tandem {
class GgufFile;
}

namespace tandem::text {

struct EncodeOptions {
  bool add_special = true;    // post-processor's special tokens (BOS, …)
  bool parse_special = true;  // special-token text in the input becomes that token
};

struct DecodeOptions {
  bool skip_special = false;
  std::optional<bool> clean_up_spaces;  // default: tokenizer_config.json's setting
};

// What tokenizer_config.json (or GGUF metadata) says around the vocabulary.
struct TokenizerInfo {
  std::string bos_token, eos_token, pad_token, unk_token;  // texts; empty if none
  std::optional<uint32_t> bos_id, eos_id;
  std::string chat_template;  // empty if none
  bool clean_up_tokenization_spaces = true;
  nlohmann::json config;  // tokenizer_config.json as read (null for GGUF)
};

class Tokenizer {
 public:
  // PATH: a Hugging Face directory (tokenizer.json, optional
  // tokenizer_config.json), a tokenizer.json file, or a GGUF model file.
  static Tokenizer load(const std::string& path);
  // config: tokenizer_config.json's object, or null.
  static Tokenizer from_spec(TokenizerSpec spec, nlohmann::json config);
  // From a GGUF file's tokenizer.ggml.* metadata (see tokenizer_gguf.cpp).
  static Tokenizer from_gguf(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<uint32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const;
  // Text of ids, invalid UTF-8 replaced by U+FFFD. Throws on ids outside the
  // vocabulary.
  std::string decode(std::span<const uint32_t> ids, const DecodeOptions& opt = {}) const;
  // The decoder's bytes before UTF-8 repair and clean-up (streaming).
  std::string decode_bytes(std::span<const uint32_t> ids, bool skip_special) const;

  size_t n_vocab() const;
  std::optional<uint32_t> token_id(std::string_view text) const;
  const std::string& token_text(uint32_t id) const;
  bool is_special(uint32_t id) const;
  const TokenizerInfo& info() const;
  const std::string& source() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static Tokenizer build(TokenizerSpec spec, nlohmann::json config);
  static Tokenizer from_gguf_file(const GgufFile& f, const std::string& path);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenisation for streaming output: feed ids one at a time,
// get the text they complete. Never returns part of a UTF-8 character; the
// concatenation of all returned pieces plus finish() equals decode(all ids)
// without clean_up_spaces (tokenization-space clean-up needs the text that
// follows, so streams never apply it). Ids outside the tokenizer's vocabulary
// (models often pad theirs) decode to nothing.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true);
  std::string step(uint32_t id);
  // Whatever is still held back (an incomplete character becomes U+FFFD).
  std::string finish();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<uint32_t> ids_;  // context tokens followed by pending ones
  size_t context_ = 0;         // how many of ids_ are context
  std::string prefix_;         // decode_bytes of the context tokens
};

}  // namespace tandem::text
