#include "common/text/tokenizer.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/text/bpe.h"
#include "common/text/decoder.h"
#include "common/text/normalizer.h"
#include "common/text/pre_tokenizer.h"
#include "common/text/unicode.h"

namespace tandem::text {
using nlohmann::json;

namespace {

// Longest-match finder for added-token texts (a byte trie; the texts are
// valid UTF-8, so a match can only start on a character boundary).
class TokenTrie {
 public:
  void insert(std::string_view text, uint32_t id, bool special) {
    if (text.empty()) return;
    size_t node = 0;
    for (unsigned char c : text) {
      size_t child = find(node, c);
      if (child == 0) {
        nodes_.push_back(Node{});
        child = nodes_.size() - 1;
        nodes_[node].children.emplace_back(c, child);
      }
      node = child;
    }
    nodes_[node].id = id;
    nodes_[node].special = special;
    nodes_[node].terminal = true;
    first_[static_cast<unsigned char>(text[0])] = true;
  }
  // The longest token starting at text[pos] (skipping special ones unless
  // allowed): its length, or 0.
  size_t match(std::string_view text, size_t pos, bool allow_special, uint32_t* id) const {
    if (!first_[static_cast<unsigned char>(text[pos])]) return 0;
    size_t node = 0, best = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = find(node, static_cast<unsigned char>(text[i]));
      if (node == 0) break;
      const Node& n = nodes_[node];
      if (n.terminal && (allow_special || !n.special)) {
        best = i + 1 - pos;
        *id = n.id;
      }
    }
    return best;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, size_t>> children;
    uint32_t id = 0;
    bool special = false;
    bool terminal = false;
  };
  size_t find(size_t node, unsigned char c) const {
    for (const auto& [k, child] : nodes_[node].children)
      if (k == c) return child;
    return 0;
  }
  std::vector<Node> nodes_{Node{}};
  bool first_[256] = {};
};

// A piece of input: either plain text or an added token already recognised.
struct Section {
  std::string text;
  std::optional<uint32_t> added;
};

// Post-processor: the special ids placed around the sequence.
struct PostProcessor {
  std::vector<uint32_t> before, after;

  void check(const TokenizerSpec& spec, const std::string& where) const {
    for (const auto* list : {&before, &after})
      for (uint32_t id : *list)
        if (id >= spec.n_ids() || spec.id_to_token[id].empty())
          fail_invalid("{}: {}: special token id {} is not in the vocabulary", spec.source, where, id);
  }

  static PostProcessor compile(const json& c, const TokenizerSpec& spec, const std::string& where) {
    PostProcessor p;
    if (c.is_null()) return p;
    const std::string type = c.is_object() ? c.value("type", std::string()) : std::string();
    auto id_of = [&](const std::string& text) {
      auto id = spec.find(text);
      if (!id) fail_invalid("{}: {}: special token {} is not in the vocabulary", spec.source, where, json(text).dump());
      return *id;
    };
    if (type == "ByteLevel") return p;
    if (type == "Sequence") {
      if (!c.contains("processors") || !c["processors"].is_array())
        fail_invalid("{}: {}.processors must be an array", spec.source, where);
      for (const auto& sub : c.value("processors", json::array())) {
        // Each processor wraps what the previous ones produced.
        PostProcessor q = compile(sub, spec, where + ".processors[]");
        p.before.insert(p.before.begin(), q.before.begin(), q.before.end());
        p.after.insert(p.after.end(), q.after.begin(), q.after.end());
      }
      return p;
    }
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      auto pair_id = [&](const char* key) {
        const json& v = c.at(key);
        if (!v.is_array() || v.size() != 2 || !v[1].is_number_unsigned())
          fail_invalid("{}: {}.{} must be [text, id]", spec.source, where, key);
        return v[1].get<uint32_t>();
      };
      p.before.push_back(pair_id("cls"));
      p.after.push_back(pair_id("sep"));
      p.check(spec, where);
      return p;
    }
    if (type == "TemplateProcessing") {
      const json& single = c.value("single", json::array());
      const json& specials = c.value("special_tokens", json::object());
      bool seen_a = false;
      for (const auto& item : single) {
        if (item.contains("Sequence")) {
          seen_a = true;
          continue;
        }
        if (!item.contains("SpecialToken"))
          fail_invalid("{}: {}.single has an item that is neither SpecialToken nor Sequence", spec.source, where);
        const std::string name = item["SpecialToken"].value("id", std::string());
        std::vector<uint32_t> ids;
        if (specials.contains(name) && specials[name].contains("ids"))
          ids = specials[name]["ids"].get<std::vector<uint32_t>>();
        else
          ids.push_back(id_of(name));
        auto& dst = seen_a ? p.after : p.before;
        dst.insert(dst.end(), ids.begin(), ids.end());
      }
      p.check(spec, where);
      return p;
    }
    fail(ErrorKind::kUnsupported, "{}: {}: post-processor type \"{}\" is not supported", spec.source, where, type);
  }
};

std::string token_text_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return {};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kNotFound, fmt::format("cannot open {}: {}", path, std::strerror(errno)), errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_dir(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

struct Tokenizer::Impl {
  TokenizerSpec spec;
  TokenizerInfo info;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  PostProcessor post;
  Decoder decoder;
  TokenTrie raw_added, normalized_added;
  std::vector<uint8_t> special;   // by id
  std::vector<uint8_t> added;     // by id
  std::vector<uint8_t> lstrip, rstrip;

  void split_added(const std::string& text, const TokenTrie& trie, bool allow_special,
                   std::vector<Section>& out) const {
    size_t start = 0;
    for (size_t i = 0; i < text.size();) {
      uint32_t id;
      const size_t n = trie.match(text, i, allow_special, &id);
      if (n == 0) {
        ++i;
        continue;
      }
      if (i > start) out.push_back(Section{text.substr(start, i - start), std::nullopt});
      out.push_back(Section{text.substr(i, n), id});
      i += n;
      start = i;
    }
    if (start < text.size()) out.push_back(Section{text.substr(start), std::nullopt});
    // lstrip / rstrip: the whitespace beside such a token goes with it.
    for (size_t k = 0; k < out.size(); ++k) {
      if (!out[k].added) continue;
      if (lstrip[*out[k].added] && k > 0 && !out[k - 1].added)
        out[k - 1].text = std::string(js_trim_end(out[k - 1].text));
      if (rstrip[*out[k].added] && k + 1 < out.size() && !out[k + 1].added)
        out[k + 1].text = std::string(js_trim_start(out[k + 1].text));
    }
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_spec(TokenizerSpec spec, json config) {
  const std::string label = spec.source;
  try {
    return build(std::move(spec), std::move(config));
  } catch (const json::exception& e) {
    // A field of the wrong JSON type somewhere in the pipeline's sections.
    fail_invalid("{}: a tokenizer field has the wrong type: {}", label, e.what());
  }
}

Tokenizer Tokenizer::build(TokenizerSpec spec, json config) {
  auto impl = std::make_unique<Impl>();
  const std::string label = spec.source;
  impl->normalizer = Normalizer::compile(spec.normalizer, label);
  impl->pre_tokenizer = PreTokenizer::compile(spec.pre_tokenizer, label);
  impl->decoder = Decoder::compile(spec.decoder, label);
  if (spec.model != TokenizerModel::kBPE)
    fail(ErrorKind::kUnsupported, "{}: {} models are not supported yet (BPE only)", label,
         to_string(spec.model));
  impl->model = BpeModel::from_spec(spec);
  impl->post = PostProcessor::compile(spec.post_processor, spec, "post_processor");

  const size_t n = spec.n_ids();
  impl->special.assign(n, 0);
  impl->added.assign(n, 0);
  impl->lstrip.assign(n, 0);
  impl->rstrip.assign(n, 0);
  for (const AddedToken& t : spec.added_tokens) {
    impl->added[t.id] = 1;
    impl->special[t.id] = t.special;
    impl->lstrip[t.id] = t.lstrip;
    impl->rstrip[t.id] = t.rstrip;
    if (t.normalized && !impl->normalizer.empty())
      impl->normalized_added.insert(impl->normalizer.apply(t.content), t.id, t.special);
    else
      impl->raw_added.insert(t.content, t.id, t.special);
  }

  TokenizerInfo& info = impl->info;
  if (config.is_object()) {
    info.bos_token = token_text_of(config.value("bos_token", json()));
    info.eos_token = token_text_of(config.value("eos_token", json()));
    info.pad_token = token_text_of(config.value("pad_token", json()));
    info.unk_token = token_text_of(config.value("unk_token", json()));
    const json& ct = config.value("chat_template", json());
    if (ct.is_string()) {
      info.chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{name, template}]: the "default" one
      for (const auto& e : ct)
        if (e.is_object() && e.value("name", std::string()) == "default")
          info.chat_template = e.value("template", std::string());
    }
    const json& cu = config.value("clean_up_tokenization_spaces", json());
    if (cu.is_boolean()) info.clean_up_tokenization_spaces = cu.get<bool>();
    info.config = config;
  }
  if (!info.bos_token.empty()) info.bos_id = spec.find(info.bos_token);
  if (!info.eos_token.empty()) info.eos_id = spec.find(info.eos_token);
  impl->spec = std::move(spec);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::string json_path = path, config_path;
  if (is_dir(path)) {
    json_path = path + "/tokenizer.json";
    config_path = path + "/tokenizer_config.json";
    if (!exists(json_path))
      fail(ErrorKind::kNotFound, "{}: no tokenizer.json in this directory", path);
  } else {
    char head[4] = {};
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorKind::kNotFound, fmt::format("cannot open {}: {}", path, std::strerror(errno)), errno);
    in.read(head, 4);
    if (in.gcount() == 4 && std::string_view(head, 4) == "GGUF") return from_gguf(path);
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    config_path = dir + "/tokenizer_config.json";
  }
  TokenizerSpec spec = load_tokenizer_json(json_path);
  json config;
  if (exists(config_path)) {
    try {
      config = json::parse(read_file(config_path));
    } catch (const json::exception& e) {
      fail_invalid("{}: not valid JSON: {}", config_path, e.what());
    }
    if (!config.is_object()) fail_invalid("{}: must hold a JSON object", config_path);
  }
  return from_spec(std::move(spec), std::move(config));
}

std::vector<uint32_t> Tokenizer::encode(std::string_view input, const EncodeOptions& opt) const {
  const Impl& m = *impl_;
  // Bad UTF-8 is read as TextDecoder reads it.
  std::string text = is_valid_utf8(input) ? std::string(input) : encode_utf8(decode_utf8(input));
  std::vector<uint32_t> ids(m.post.before.begin(), m.post.before.end());
  if (!opt.add_special) ids.clear();

  std::vector<Section> outer, inner;
  std::vector<std::string> words;
  m.split_added(text, m.raw_added, opt.parse_special, outer);
  for (size_t si = 0; si < outer.size(); ++si) {
    const Section& s = outer[si];
    if (s.added) {
      ids.push_back(*s.added);
      continue;
    }
    if (s.text.empty()) continue;
    const std::string normalized = m.normalizer.empty() ? s.text : m.normalizer.apply(s.text);
    inner.clear();
    m.split_added(normalized, m.normalized_added, opt.parse_special, inner);
    for (const Section& sub : inner) {
      if (sub.added) {
        ids.push_back(*sub.added);
        continue;
      }
      if (sub.text.empty()) continue;
      words.clear();
      m.pre_tokenizer.split(sub.text, si, words);
      for (const auto& w : words) m.model.encode_word(w, ids);
    }
  }
  if (opt.add_special) ids.insert(ids.end(), m.post.after.begin(), m.post.after.end());
  return ids;
}

std::string Tokenizer::decode_bytes(std::span<const uint32_t> ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::vector<DecodePiece> pieces;
  pieces.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id >= m.spec.n_ids() || m.spec.id_to_token[id].empty())
      fail_invalid("{}: token id {} is not in the vocabulary ({} ids)", m.spec.source, id,
                   m.spec.n_ids());
    if (skip_special && m.special[id]) continue;
    pieces.push_back(DecodePiece{m.spec.id_to_token[id], m.added[id] != 0});
  }
  return m.decoder.decode(std::move(pieces));
}

std::string Tokenizer::decode(std::span<const uint32_t> ids, const DecodeOptions& opt) const {
  std::string bytes = decode_bytes(ids, opt.skip_special);
  std::string text = is_valid_utf8(bytes) ? std::move(bytes) : encode_utf8(decode_utf8(bytes));
  if (opt.clean_up_spaces.value_or(impl_->info.clean_up_tokenization_spaces))
    text = clean_up_tokenization(text);
  return text;
}

size_t Tokenizer::n_vocab() const { return impl_->spec.n_ids(); }
std::optional<uint32_t> Tokenizer::token_id(std::string_view text) const {
  return impl_->spec.find(text);
}
const std::string& Tokenizer::token_text(uint32_t id) const {
  if (id >= impl_->spec.n_ids())
    fail_invalid("{}: token id {} is not in the vocabulary", impl_->spec.source, id);
  return impl_->spec.id_to_token[id];
}
bool Tokenizer::is_special(uint32_t id) const {
  return id < impl_->special.size() && impl_->special[id];
}
const TokenizerInfo& Tokenizer::info() const { return impl_->info; }
const std::string& Tokenizer::source() const { return impl_->spec.source; }

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special)
    : tok_(&tok), skip_special_(skip_special) {}

std::string StreamDecoder::step(uint32_t id) {
  // An id the tokenizer does not know (models often pad their vocabulary
  // beyond the tokenizer's) decodes to nothing, as a skipped token would.
  if (id >= tok_->n_vocab() || tok_->token_text(id).empty()) return {};
  ids_.push_back(id);
  std::string all = tok_->decode_bytes(ids_, skip_special_);
  const bool complete = utf8_complete_prefix(all) == all.size();
  if (complete && all == prefix_) {
    // Nothing new (e.g. a skipped special token): drop it, so pending tokens
    // cannot pile up and make every step slower.
    ids_.pop_back();
    return {};
  }
  // Hold back while the newest bytes end inside a UTF-8 character.
  if (all.size() <= prefix_.size() || !complete) return {};
  size_t common = 0;
  while (common < prefix_.size() && common < all.size() && all[common] == prefix_[common]) ++common;
  std::string fresh = all.substr(common);
  // The tokens just decoded become the context for the next ones (decoders
  // such as Strip treat the first token specially).
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<long>(context_));
  context_ = ids_.size();
  prefix_ = tok_->decode_bytes(ids_, skip_special_);
  return is_valid_utf8(fresh) ? fresh : encode_utf8(decode_utf8(fresh));
}

std::string StreamDecoder::finish() {
  std::string all = tok_->decode_bytes(ids_, skip_special_);
  std::string rest = all.size() > prefix_.size() ? all.substr(prefix_.size()) : std::string();
  ids_.clear();
  context_ = 0;
  prefix_.clear();
  return encode_utf8(decode_utf8(rest));
}

}  // namespace tandem::text
