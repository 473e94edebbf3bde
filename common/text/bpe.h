// The BPE model of a tokenizer: turns one pre-token (UTF-8 text, already
// normalised and pre-tokenised; byte-level tokenizers have mapped its bytes to
// their printable stand-ins) into vocabulary ids.
//
// Semantics are Hugging Face's BPE: the word starts as one symbol per
// character; the adjacent pair with the lowest merge rank is merged, the
// leftmost on equal ranks, until no listed pair is left. A character the
// vocabulary lacks becomes its UTF-8 bytes as <0xXX> tokens (byte_fallback),
// else the unknown token (consecutive ones fused with fuse_unk), else nothing.
// ignore_merges: a pre-token that is itself in the vocabulary is taken whole.
// end_of_word_suffix / continuing_subword_prefix are applied to the word's
// last / non-first characters before merging, as the Rust implementation does.
//
// Merges are kept as (left id, right id) -> (rank, merged id), so merging
// works on integers; results for short words are cached.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/text/tokenizer_json.h"

namespace tandem::text {

class BpeModel {
 public:
  // Builds from a parsed spec (model must be BPE). Throws tandem::Error if the
  // spec names an unknown token that is not in the vocabulary.
  static BpeModel from_spec(const TokenizerSpec& spec);

  // Appends the ids of one pre-token to out.
  void encode_word(std::string_view word, std::vector<uint32_t>& out) const;

  std::optional<uint32_t> unk_id() const { return unk_id_; }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t merged;
  };
  static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }
  void merge_word(std::string_view word, std::vector<uint32_t>& out) const;
  void emit_unknown(std::string_view chars, std::vector<uint32_t>& out) const;

  std::unordered_map<std::string, uint32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<uint32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string end_of_word_suffix_;
  std::string continuing_subword_prefix_;
  uint32_t byte_ids_[256] = {};  // <0xXX> token ids (byte_fallback)
  bool have_byte_[256] = {};

  // Cache of short words; cleared when full. Mutable: encoding is logically
  // const. A BpeModel is therefore not safe to share between threads.
  static constexpr size_t kCacheMaxWord = 256;
  static constexpr size_t kCacheCapacity = 1 << 16;
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;
};

}  // namespace tandem::text
