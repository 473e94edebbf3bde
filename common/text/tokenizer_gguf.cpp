// Tokenizer::from_gguf: a GGUF file's tokenizer.ggml.* metadata translated
// into the tokenizer.json it corresponds to, then built like any other.
//
// - model "gpt2": byte-level BPE. tokenizer.ggml.pre names the split patterns
//   (llama.cpp's names: qwen2, llama-bpe/llama3, deepseek-v3, gpt-2/default …).
// - model "llama": SentencePiece BPE with byte fallback. GGUF keeps scores, not
//   merges; the merges are derived from the scores as Hugging Face's
//   SentencePiece converter derives them (every split of a piece into two
//   pieces, ordered by the merged piece's score).
// Token types: 3 (control) become special added tokens, 4 (user-defined)
// plain added tokens.
#include <algorithm>

#include "common/error.h"
#include "common/formats/gguf.h"
#include "common/text/tokenizer.h"
#include "common/text/unicode.h"

namespace tandem::text {
using nlohmann::json;

namespace {

constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kDeepseekV3[] = {
    R"(\p{N}{1,3})",
    R"([一-龥぀-ゟ゠-ヿ]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

json split(const char* pattern) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"},
          {"invert", false}};
}
json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
          {"use_regex", use_regex}};
}

// What a byte-level GGUF's tokenizer.ggml.pre implies, as llama.cpp reads it:
// the split patterns, and for the Llama 3 family whole-word vocabulary
// lookups (ignore_merges) and a BOS by default. clean_up follows the
// family's own tokenizer_config.json.
struct PreTokenizerPlan {
  json pre_tokenizer;
  bool ignore_merges = false;
  bool add_bos_default = false;
  bool clean_up = false;
};

PreTokenizerPlan plan_for(const std::string& pre, const std::string& path) {
  PreTokenizerPlan p;
  auto sequence = [](std::initializer_list<const char*> patterns) {
    json list = json::array();
    for (const char* pattern : patterns) list.push_back(split(pattern));
    list.push_back(byte_level(false));
    return json{{"type", "Sequence"}, {"pretokenizers", list}};
  };
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    p.pre_tokenizer = sequence({kQwen2});
  } else if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3") {
    p.pre_tokenizer = sequence({kLlama3});
    p.ignore_merges = true;
    p.add_bos_default = true;
    p.clean_up = true;
  } else if (pre == "smaug-bpe") {
    p.pre_tokenizer = sequence({kLlama3});
  } else if (pre == "deepseek-v3") {
    p.pre_tokenizer = sequence({kDeepseekV3[0], kDeepseekV3[1], kDeepseekV3[2]});
  } else if (pre == "gpt-2" || pre == "gpt2") {
    p.pre_tokenizer = byte_level(true);
  } else if (pre == "default" || pre.empty()) {
    // llama.cpp's default byte-level splits, applied in turn.
    p.pre_tokenizer = sequence({R"([\p{P}\$\+<=>\^~\|]+)",
                                R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                                R"(\p{N}+)", R"([0-9][0-9][0-9])"});
  } else {
    fail(ErrorKind::kUnsupported,
         "{}: tokenizer.ggml.pre \"{}\" is not supported (supported: qwen2, deepseek-r1-qwen, "
         "llama-bpe, llama3, llama-v3, smaug-bpe, deepseek-v3, gpt-2, default)",
         path, pre);
  }
  return p;
}

std::vector<std::string> string_array(const GgufFile& f, const std::string& key, bool required) {
  std::vector<std::string> out;
  const GgufArray* a = f.get_array(key);
  if (!a) {
    if (required) fail_invalid("{}: {} is missing", f.path(), key);
    return out;
  }
  if (a->elem_type != GgufType::kString) fail_invalid("{}: {} must be an array of strings", f.path(), key);
  out.reserve(a->items.size());
  for (const auto& v : a->items) out.push_back(std::get<std::string>(v.value));
  return out;
}

template <typename T>
std::vector<T> number_array(const GgufFile& f, const std::string& key, size_t n) {
  std::vector<T> out;
  const GgufArray* a = f.get_array(key);
  if (!a) return out;
  if (a->items.size() != n)
    fail_invalid("{}: {} has {} entries for {} tokens", f.path(), key, a->items.size(), n);
  for (const auto& v : a->items) {
    if (auto* u = std::get_if<uint64_t>(&v.value)) out.push_back(static_cast<T>(*u));
    else if (auto* i = std::get_if<int64_t>(&v.value)) out.push_back(static_cast<T>(*i));
    else if (auto* d = std::get_if<double>(&v.value)) out.push_back(static_cast<T>(*d));
    else fail_invalid("{}: {} must hold numbers", f.path(), key);
  }
  return out;
}

// Hugging Face's SentencePiece converter: merges from scores.
json merges_from_scores(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                        const std::vector<int>& types, const std::unordered_map<std::string, uint32_t>& vocab) {
  struct M {
    uint32_t l, r;
    float score;
    std::string a, b;
  };
  std::vector<M> merges;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!types.empty() && types[id] != 1) continue;
    const std::u32string cps = decode_utf8(tokens[id]);
    std::vector<M> local;
    for (size_t k = 1; k < cps.size(); ++k) {
      std::string a = encode_utf8(cps.substr(0, k)), b = encode_utf8(cps.substr(k));
      auto ia = vocab.find(a), ib = vocab.find(b);
      if (ia != vocab.end() && ib != vocab.end())
        local.push_back(M{ia->second, ib->second, scores.empty() ? 0.f : scores[id], a, b});
    }
    std::sort(local.begin(), local.end(),
              [](const M& x, const M& y) { return x.l != y.l ? x.l < y.l : x.r < y.r; });
    for (auto& m : local) merges.push_back(std::move(m));
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const M& x, const M& y) { return x.score > y.score; });
  json out = json::array();
  for (const auto& m : merges) out.push_back(json::array({m.a, m.b}));
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  try {
    return from_gguf_file(f, path);
  } catch (const json::exception& e) {
    fail_invalid("{}: tokenizer metadata could not be converted: {}", path, e.what());
  }
}

Tokenizer Tokenizer::from_gguf_file(const GgufFile& f, const std::string& path) {
  const std::string model = f.get_string("tokenizer.ggml.model").value_or("");
  if (model.empty()) fail_invalid("{}: no tokenizer.ggml.model: this GGUF carries no tokenizer", path);
  if (model != "gpt2" && model != "llama")
    fail(ErrorKind::kUnsupported, "{}: tokenizer.ggml.model \"{}\" is not supported (gpt2, llama)", path, model);
  const auto tokens = string_array(f, "tokenizer.ggml.tokens", true);
  const auto types = number_array<int>(f, "tokenizer.ggml.token_type", tokens.size());
  const bool spm = model == "llama";

  json vocab = json::object();
  std::unordered_map<std::string, uint32_t> index;
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!is_valid_utf8(tokens[id]))
      fail_invalid("{}: tokenizer.ggml.tokens[{}] is not valid UTF-8", path, id);
    // A text listed twice keeps its first id (later ones are unreachable).
    if (!index.emplace(tokens[id], static_cast<uint32_t>(id)).second) continue;
    vocab[tokens[id]] = id;
    const int type = types.empty() ? 1 : types[id];
    // Unknown (2) and control (3) tokens are special, user-defined (4) not;
    // all three are matched as text in the input, as llama.cpp does.
    if (type == 2 || type == 3 || type == 4)
      added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false},
                       {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                       {"special", type != 4}});
  }
  // llama.cpp's defaults for SentencePiece vocabularies: <unk>=0, <s>=1, </s>=2.
  auto token_of = [&](const char* key, std::optional<uint64_t> spm_default) -> std::optional<uint32_t> {
    auto v = f.get_uint(key);
    if (!v && spm) v = spm_default;
    if (v && *v >= tokens.size()) fail_invalid("{}: {} = {} is outside the vocabulary", path, key, *v);
    return v ? std::optional<uint32_t>(static_cast<uint32_t>(*v)) : std::nullopt;
  };
  const auto bos = token_of("tokenizer.ggml.bos_token_id", 1);
  const auto eos = token_of("tokenizer.ggml.eos_token_id", 2);
  const auto unk = token_of("tokenizer.ggml.unknown_token_id", 0);
  PreTokenizerPlan plan;
  if (!spm) plan = plan_for(f.get_string("tokenizer.ggml.pre").value_or(""), path);
  const bool add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || plan.add_bos_default);
  const bool add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);

  json tj;
  tj["version"] = "1.0";
  tj["added_tokens"] = added;
  json post = nullptr;
  if ((add_bos && bos) || (add_eos && eos)) {
    json single = json::array(), specials = json::object();
    if (add_bos && bos) {
      single.push_back({{"SpecialToken", {{"id", tokens[*bos]}, {"type_id", 0}}}});
      specials[tokens[*bos]] = {{"id", tokens[*bos]}, {"ids", {*bos}}, {"tokens", {tokens[*bos]}}};
    }
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos && eos) {
      single.push_back({{"SpecialToken", {{"id", tokens[*eos]}, {"type_id", 0}}}});
      specials[tokens[*eos]] = {{"id", tokens[*eos]}, {"ids", {*eos}}, {"tokens", {tokens[*eos]}}};
    }
    post = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single},
            {"special_tokens", specials}};
  }
  tj["post_processor"] = post;
  if (spm) {
    const bool prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    json norm = json::array();
    if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
    tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
    tj["pre_tokenizer"] = nullptr;
    json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                            {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
    if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
    const auto scores = number_array<float>(f, "tokenizer.ggml.scores", tokens.size());
    tj["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"byte_fallback", true}, {"fuse_unk", true},
                   {"unk_token", unk ? json(tokens[*unk]) : json(nullptr)},
                   {"merges", merges_from_scores(tokens, scores, types, index)}};
  } else {
    tj["normalizer"] = nullptr;
    tj["pre_tokenizer"] = plan.pre_tokenizer;
    tj["decoder"] = byte_level(true);
    tj["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"byte_fallback", false},
                   {"ignore_merges", plan.ignore_merges},
                   {"merges", string_array(f, "tokenizer.ggml.merges", true)}};
  }

  json config = json::object();
  if (bos) config["bos_token"] = tokens[*bos];
  if (eos) config["eos_token"] = tokens[*eos];
  if (unk) config["unk_token"] = tokens[*unk];
  if (auto t = f.get_string("tokenizer.chat_template")) config["chat_template"] = *t;
  config["clean_up_tokenization_spaces"] = plan.clean_up;
  TokenizerSpec spec = parse_tokenizer_json(tj.dump(), path);
  return from_spec(std::move(spec), std::move(config));
}

}  // namespace tandem::text
