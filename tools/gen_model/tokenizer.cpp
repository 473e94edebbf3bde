// A small byte-level BPE tokenizer (GPT-2 byte symbols, Qwen2 pre-tokenizer
// regex, ChatML template), written as GGUF metadata or HF tokenizer files.
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tools/gen_model/internal.h"

namespace tandem::genmodel {
namespace {

// Each merge joins two tokens that exist before it ("Ġ" is the space byte).
const char* const kMerges[] = {
    "Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "e r", "Ġ s", "a t", "Ġ w", "Ġ o", "e n", "Ġ c",
    "i t", "i s", "a n", "o r", "e s", "Ġ b", "e d", "Ġ f", "Ġ p", "o u", "a l", "a r", "Ġ m",
    "Ġ d", "Ġ h", "i c", "a s", "l e", "o m", "l l", "Ġ n", "Ġ l", "s t", "v e", "Ġ e", "r o",
    "l y", "Ġ g", "c t", "Ġ y", "Ġ k", "Ġ Ġ", "Ġ T", "Ġ I", "Ġ A", "Ġ S", "Ġ C", "Ġ G", "Ċ Ċ",
    "t h", "f t", "Ġt he", "in g", "Ġa n", "Ġt o", "Ġo f", "Ġ in", "i on", "en t", "Ġ re",
    "Ġb e", "Ġt h", "Ġ is", "Ġ it", "Ġw h", "Ġf or", "Ġo n", "Ġw it", "Ġwit h", "Ġa s", "Ġs t",
    "Ġc on", "Ġy ou", "at ion", "ĠT he", "Ġan d", "Ġth at", "e ct", "Ġp ro", "Ġ he", "Ġw e",
    "Ġa re", "Ġh a", "Ġm o", "Ġs e", "Ġc om", "i m", "i l", "u s", "u t", "e l", "o t", "i g",
    "Ġ u", "Ġ r", "e t", "o w", "c e", "i r", "i d", "Ġ (", "Ġ -", "Ġ =", "Ġ {", ") ;", "( )",
    ". Ċ", "Ġ 1", "0 0", "t er", "ar e", "re e", "th er", "in d", "Ġin ter", "at er", "ĠG en",
    "ĠGen er", "ĠGener al", "Ġs o", "Ġso ft", "w are", "Ġsoft ware", "Ġl ic", "Ġlic en", "s e",
    "Ġlicen se", "Ġf ree", "Ġw or", "Ġwor k", "Ġwork s", "Ġo ther", "Ġk ind", "Ġkind s",
};
constexpr uint32_t kMergeCount = sizeof(kMerges) / sizeof(kMerges[0]);
const char* const kSpecials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
constexpr uint32_t kSpecialCount = 3;

const char* kChatTemplate =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Qwen2's pre-tokenizer split (llama.cpp: tokenizer.ggml.pre = "qwen2").
const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves,
// the rest map to U+0100 upwards in byte order.
std::vector<std::string> byte_symbols() {
  auto printable = [](uint32_t b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  std::vector<std::string> out(256);
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) out[b] = utf8(printable(b) ? b : 256 + n++);
  return out;
}

}  // namespace

uint32_t natural_vocab_size() { return 256 + kMergeCount + kSpecialCount; }

Tokenizer make_tokenizer(uint32_t vocab_size) {
  if (vocab_size == 0) vocab_size = natural_vocab_size();
  if (vocab_size < 256 + kSpecialCount)
    fail(ErrorKind::kInvalidInput, "vocab size {} is too small: the byte-level tokenizer needs at least {}",
         vocab_size, 256 + kSpecialCount);
  Tokenizer t;
  t.tokens = byte_symbols();
  std::set<std::string> have(t.tokens.begin(), t.tokens.end());
  const uint32_t n_merges = std::min(kMergeCount, vocab_size - 256 - kSpecialCount);
  for (uint32_t i = 0; i < n_merges; ++i) {
    std::string m = kMerges[i];
    size_t sp = m.find(' ');
    std::string left = m.substr(0, sp), right = m.substr(sp + 1), joined = left + right;
    if (!have.count(left) || !have.count(right) || have.count(joined))
      throw Error(ErrorKind::kInternal, fmt::format("gen_model: bad merge '{}'", m));
    have.insert(joined);
    t.tokens.push_back(joined);
    t.merges.push_back(m);
  }
  t.pad_id = uint32_t(t.tokens.size());
  for (auto* s : kSpecials) t.tokens.push_back(s);
  t.n_special = kSpecialCount;
  t.eos_id = uint32_t(t.tokens.size()) - 1;  // <|im_end|>
  t.chat_template = kChatTemplate;
  return t;
}

void add_gguf_tokenizer(GgufWriter& w, const Tokenizer& tok, uint32_t vocab_size) {
  std::vector<std::string> tokens = tok.tokens;
  std::vector<int32_t> types(tokens.size(), 1);  // NORMAL
  for (size_t i = tokens.size() - tok.n_special; i < tokens.size(); ++i) types[i] = 3;  // CONTROL
  for (uint32_t i = uint32_t(tokens.size()); i < vocab_size; ++i) {
    tokens.push_back(fmt::format("[PAD{}]", i));
    types.push_back(5);  // UNUSED
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", tok.merges);
  w.set_u32("tokenizer.ggml.eos_token_id", tok.eos_id);
  w.set_u32("tokenizer.ggml.padding_token_id", tok.pad_id);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_string("tokenizer.chat_template", tok.chat_template);
}

std::string hf_tokenizer_json(const Tokenizer& tok) {
  using json = nlohmann::ordered_json;
  auto byte_level = json{{"type", "ByteLevel"}, {"add_prefix_space", false},
                         {"trim_offsets", false}, {"use_regex", false}};
  json added = json::array();
  const size_t first_special = tok.tokens.size() - tok.n_special;
  for (size_t i = first_special; i < tok.tokens.size(); ++i)
    added.push_back({{"id", i}, {"content", tok.tokens[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                     {"special", true}});
  json vocab = json::object();
  for (size_t i = 0; i < first_special; ++i) vocab[tok.tokens[i]] = i;
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2Regex}}}, {"behavior", "Isolated"},
         {"invert", false}},
        byte_level}}};
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""},
                {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", tok.merges}};
  return j.dump(1) + "\n";
}

std::string hf_tokenizer_config_json(const Tokenizer& tok, uint32_t max_positions) {
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["bos_token"] = nullptr;
  j["eos_token"] = tok.tokens[tok.eos_id];
  j["pad_token"] = tok.tokens[tok.pad_id];
  j["add_bos_token"] = false;
  j["chat_template"] = tok.chat_template;
  j["model_max_length"] = max_positions;
  return j.dump(2) + "\n";
}

}  // namespace tandem::genmodel
