// Hugging Face tokenizer.json, parsed and validated into a TokenizerSpec: the
// model (BPE fully: vocab, merges in either format, byte_fallback, unk_token;
// Unigram, WordPiece and WordLevel: vocab and unknown token), the added tokens,
// and the normalizer / pre_tokenizer / post_processor / decoder kept as their
// JSON subtrees for the tokenizer proper to interpret.
//
// Validation: ids non-negative, unique and below a limit; added tokens agree
// with the vocab (same id for the same text, no id given to two texts); every
// merge names two vocab tokens whose concatenation is in the vocab too;
// counts, token lengths and JSON nesting bounded; no repeated JSON keys.
// Errors are tandem::Error naming the file and the entry ("model.vocab['ab']",
// "model.merges[12]", "added_tokens[3]").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem {

enum class TokenizerModel { kBPE, kUnigram, kWordPiece, kWordLevel };
// The name tokenizer.json uses: "BPE", "Unigram", "WordPiece", "WordLevel".
const char* to_string(TokenizerModel m);

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;  // default: !special, as Hugging Face's AddedToken
  bool single_word = false;
};

struct TokenizerSpec {
  std::string source;  // the file (or label) it came from, for messages
  TokenizerModel model = TokenizerModel::kBPE;

  // model.vocab: token text -> id (Unigram: piece -> its index).
  std::unordered_map<std::string, uint32_t> vocab;
  std::vector<double> unigram_scores;  // Unigram only, indexed by id

  // BPE merges in rank order (merges[0] is applied first). A merge listed
  // twice keeps its first rank; duplicate_merges counts the repeats.
  std::vector<std::pair<std::string, std::string>> merges;
  size_t duplicate_merges = 0;

  bool byte_fallback = false;
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // BPE, WordPiece
  std::string end_of_word_suffix;         // BPE
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::optional<double> dropout;

  std::vector<AddedToken> added_tokens;  // in file order

  // Kept as written; null when absent.
  nlohmann::json normalizer;
  nlohmann::json pre_tokenizer;
  nlohmann::json post_processor;
  nlohmann::json decoder;
  // model without "vocab" and "merges" (options this parser does not interpret).
  nlohmann::json model_options;

  // id -> text for every id in the vocab or the added tokens; ids nobody
  // uses (holes) are empty. size() is the largest id + 1.
  std::vector<std::string> id_to_token;

  size_t n_ids() const { return id_to_token.size(); }
  // The id of a vocab entry or added token with exactly this text.
  std::optional<uint32_t> find(std::string_view text) const;
  const AddedToken* find_added(uint32_t id) const;
};

struct TokenizerLimits {
  uint64_t max_ids = 1u << 22;  // vocab entries, and the largest id + 1
  uint64_t max_merges = 1u << 22;
  uint64_t max_added = 1u << 20;
  uint64_t max_token_bytes = 1u << 16;  // one token's text
  uint64_t max_text_bytes = 512ull << 20;
  int max_depth = 64;  // JSON nesting
};

// Parses tokenizer.json text; label names it in errors (usually the path).
TokenizerSpec parse_tokenizer_json(std::string_view text, const std::string& label,
                                   const TokenizerLimits& limits = {});
// Reads and parses a file.
TokenizerSpec load_tokenizer_json(const std::string& path, const TokenizerLimits& limits = {});

}  // namespace tandem
