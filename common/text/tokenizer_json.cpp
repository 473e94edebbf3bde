#include "common/text/tokenizer_json.h"

#include <unordered_set>

#include "common/error.h"
#include "common/mapped_file.h"

namespace tandem {
using nlohmann::json;

namespace {

// A token or key as it appears in messages: JSON-quoted (control characters
// escaped) and shortened.
std::string quote(std::string_view s) {
  constexpr size_t kMax = 60;
  bool cut = s.size() > kMax;
  if (cut) {
    s = s.substr(0, kMax);
    while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.remove_suffix(1);
    if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.remove_suffix(1);
  }
  std::string q = json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
  return cut ? q + "..." : q;
}

// A JSON value shown in a message: scalars as written, containers by type.
std::string show(const json& v) {
  if (v.is_structured()) return std::string("an ") + v.type_name();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Watches the parser's events: rejects nesting beyond the limit (later code
// and messages recurse over values) and repeated keys in any object (the DOM
// would silently keep only the last).
class ParseWatcher {
 public:
  ParseWatcher(const std::string& label, int max_depth) : label_(label), max_depth_(max_depth) {}

  bool operator()(int depth, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        if (depth > max_depth_)
          fail_invalid("{}: {}: JSON nests deeper than {} levels", label_, path(), max_depth_);
        Frame f;
        f.name = element_name();
        f.is_object = ev == json::parse_event_t::object_start;
        stack_.push_back(std::move(f));
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack_.empty()) stack_.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& top = stack_.back();
        top.key = parsed.get_ref<const std::string&>();
        if (!top.keys.insert(top.key).second)
          fail_invalid("{}: {}: key {} appears twice", label_, path_of(stack_.size()),
                       quote(top.key));
        break;
      }
      case json::parse_event_t::value:
        element_name();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    std::string name;  // how the parent names this container
    bool is_object = false;
    std::string key;   // the current key (objects)
    size_t index = 0;  // the next element (arrays)
    std::unordered_set<std::string> keys;
  };
  // Name of a new element of the innermost container (advances array indices).
  std::string element_name() {
    if (stack_.empty()) return "";
    Frame& top = stack_.back();
    if (top.is_object) return top.key;
    return "[" + std::to_string(top.index++) + "]";
  }
  std::string path_of(size_t n) const {
    std::string p;
    for (size_t i = 1; i < n; ++i) {
      const std::string& name = stack_[i].name;
      if (!p.empty() && name[0] != '[') p += '.';
      p += name;
    }
    return p.empty() ? "top level" : p;
  }
  std::string path() const { return path_of(stack_.size()); }

  const std::string& label_;
  int max_depth_;
  std::vector<Frame> stack_;
};

class SpecParser {
 public:
  SpecParser(const std::string& label, const TokenizerLimits& limits)
      : label_(label), limits_(limits) {}

  TokenizerSpec parse(std::string_view text) {
    if (text.size() > limits_.max_text_bytes)
      fail_invalid("{}: {} bytes is more than the limit of {} for a tokenizer.json", label_,
                   text.size(), limits_.max_text_bytes);
    json root;
    try {
      root = json::parse(text.begin(), text.end(), ParseWatcher(label_, limits_.max_depth));
    } catch (const json::exception& e) {
      fail_invalid("{}: not valid JSON ({})", label_, e.what());
    }
    if (!root.is_object()) fail_invalid("{}: the top level must be a JSON object", label_);
    spec_.source = label_;

    auto m = root.find("model");
    if (m == root.end() || !m->is_object())
      fail_invalid("{}: 'model' is missing or not an object", label_);
    read_model(*m);
    read_added(root);
    for (auto [key, out] : {std::pair{"normalizer", &spec_.normalizer},
                            std::pair{"pre_tokenizer", &spec_.pre_tokenizer},
                            std::pair{"post_processor", &spec_.post_processor},
                            std::pair{"decoder", &spec_.decoder}}) {
      auto it = root.find(key);
      if (it == root.end() || it->is_null()) continue;
      if (!it->is_object())
        fail_invalid("{}: '{}' must be an object or null, got {}", label_, key, show(*it));
      *out = std::move(*it);
    }
    if (spec_.unk_token && !spec_.find(*spec_.unk_token))
      fail_invalid("{}: model.unk_token {} is neither in the vocab nor an added token", label_,
                   quote(*spec_.unk_token));
    return std::move(spec_);
  }

 private:
  void read_model(json& m) {
    auto type = m.find("type");
    std::string t;
    if (type != m.end() && !type->is_null()) {
      if (!type->is_string())
        fail_invalid("{}: model.type must be a string, got {}", label_, show(*type));
      t = type->get<std::string>();
    } else if (m.contains("merges")) {  // files older than the "type" tag
      t = "BPE";
    } else if (m.contains("vocab") && m["vocab"].is_array()) {
      t = "Unigram";
    } else {
      fail_invalid("{}: model.type is missing", label_);
    }
    if (t == "BPE")
      spec_.model = TokenizerModel::kBPE;
    else if (t == "Unigram")
      spec_.model = TokenizerModel::kUnigram;
    else if (t == "WordPiece")
      spec_.model = TokenizerModel::kWordPiece;
    else if (t == "WordLevel")
      spec_.model = TokenizerModel::kWordLevel;
    else
      fail(ErrorKind::kUnsupported,
           "{}: model.type {} is not supported (BPE, Unigram, WordPiece, WordLevel)", label_,
           quote(t));

    auto vocab = m.find("vocab");
    if (vocab == m.end()) fail_invalid("{}: model.vocab is missing", label_);
    if (spec_.model == TokenizerModel::kUnigram)
      read_unigram_vocab(*vocab);
    else
      read_vocab(*vocab);
    if (spec_.vocab.empty()) fail_invalid("{}: model.vocab is empty", label_);

    spec_.unk_token = opt_string(m, "unk_token");
    if (spec_.model == TokenizerModel::kUnigram) {
      auto unk = m.find("unk_id");
      if (unk != m.end() && !unk->is_null()) {
        uint64_t id = id_value(*unk, [] { return std::string("model.unk_id"); });
        if (id >= spec_.unigram_scores.size())
          fail_invalid("{}: model.unk_id {} is not an id of the {} pieces", label_, id,
                       spec_.unigram_scores.size());
        spec_.unk_token = spec_.id_to_token[id];
      }
    }
    spec_.byte_fallback = opt_bool(m, "byte_fallback", false);
    spec_.fuse_unk = opt_bool(m, "fuse_unk", false);
    spec_.ignore_merges = opt_bool(m, "ignore_merges", false);
    spec_.continuing_subword_prefix = opt_string(m, "continuing_subword_prefix").value_or("");
    spec_.end_of_word_suffix = opt_string(m, "end_of_word_suffix").value_or("");
    auto dropout = m.find("dropout");
    if (dropout != m.end() && !dropout->is_null()) {
      if (!dropout->is_number() || !(dropout->get<double>() >= 0.0) || dropout->get<double>() > 1.0)
        fail_invalid("{}: model.dropout must be a number in [0, 1], got {}", label_,
                     show(*dropout));
      spec_.dropout = dropout->get<double>();
    }
    auto merges = m.find("merges");
    if (merges != m.end() && !merges->is_null()) {
      if (spec_.model != TokenizerModel::kBPE)
        fail_invalid("{}: model.merges given for a {} model", label_, to_string(spec_.model));
      read_merges(*merges);
    }
    m.erase("vocab");
    m.erase("merges");
    spec_.model_options = std::move(m);
  }

  // `where` (a callable returning the entry's name, made only for messages)
  // names the entry in errors: "model.vocab[\"ab\"]", "added_tokens[3]".

  // A non-negative integer id below the limit.
  template <typename Where>
  uint64_t id_value(const json& v, const Where& where) {
    if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0)
      fail_invalid("{}: {}: id {} is negative", label_, where(), v.get<int64_t>());
    if (!v.is_number_integer())
      fail_invalid("{}: {}: id must be a non-negative integer, got {}", label_, where(), show(v));
    uint64_t id = v.get<uint64_t>();
    if (id >= limits_.max_ids)
      fail_invalid("{}: {}: id {} is not below the limit of {}", label_, where(), id,
                   limits_.max_ids);
    return id;
  }

  template <typename Where>
  void check_text(const std::string& s, const Where& where) {
    if (s.empty()) fail_invalid("{}: {}: empty token", label_, where());
    if (s.size() > limits_.max_token_bytes)
      fail_invalid("{}: {}: token of {} bytes is longer than the limit of {}", label_, where(),
                   s.size(), limits_.max_token_bytes);
  }

  // Records id -> text, refusing an id given to two different texts.
  template <typename Where>
  void assign(uint64_t id, const std::string& text, const Where& where) {
    if (id >= spec_.id_to_token.size()) spec_.id_to_token.resize(id + 1);
    std::string& slot = spec_.id_to_token[id];
    if (!slot.empty() && slot != text)
      fail_invalid("{}: {}: id {} is also the id of {}", label_, where(), id, quote(slot));
    slot = text;
  }

  void read_vocab(const json& v) {
    if (!v.is_object())
      fail_invalid("{}: model.vocab must be an object of token: id, got {}", label_, show(v));
    check_count(v.size(), limits_.max_ids, "model.vocab entries");
    spec_.vocab.reserve(v.size());
    for (const auto& [tok, idv] : v.items()) {
      auto where = [&tok = tok] { return "model.vocab[" + quote(tok) + "]"; };
      check_text(tok, where);
      uint64_t id = id_value(idv, where);
      assign(id, tok, where);  // texts are unique keys, so a taken id is a clash
      spec_.vocab.emplace(tok, uint32_t(id));
    }
  }

  void read_unigram_vocab(const json& v) {
    if (!v.is_array())
      fail_invalid("{}: model.vocab of a Unigram model must be an array of [piece, score], got {}",
                   label_, show(v));
    check_count(v.size(), limits_.max_ids, "model.vocab entries");
    spec_.vocab.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      auto where = [i] { return "model.vocab[" + std::to_string(i) + "]"; };
      const json& e = v[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        fail_invalid("{}: {}: expected [piece, score], got {}", label_, where(), show(e));
      const std::string& piece = e[0].get_ref<const std::string&>();
      check_text(piece, where);
      if (!spec_.vocab.emplace(piece, uint32_t(i)).second)
        fail_invalid("{}: {}: piece {} appears twice", label_, where(), quote(piece));
      assign(i, piece, where);
      spec_.unigram_scores.push_back(e[1].get<double>());
    }
  }

  void read_merges(const json& v) {
    if (!v.is_array()) fail_invalid("{}: model.merges must be an array, got {}", label_, show(v));
    check_count(v.size(), limits_.max_merges, "model.merges entries");
    spec_.merges.reserve(v.size());
    std::unordered_set<std::string> seen;
    const std::string& prefix = spec_.continuing_subword_prefix;
    for (size_t i = 0; i < v.size(); ++i) {
      const json& e = v[i];
      const std::string where = "model.merges[" + std::to_string(i) + "]";
      std::string a, b;
      if (e.is_string()) {  // "a b"
        const std::string& s = e.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
            s.find(' ', sp + 1) != std::string::npos)
          fail_invalid("{}: {}: {} is not two tokens separated by one space", label_, where,
                       quote(s));
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
        if (a.empty() || b.empty())
          fail_invalid("{}: {}: a merge of an empty token", label_, where);
      } else {
        fail_invalid("{}: {}: expected \"a b\" or [\"a\", \"b\"], got {}", label_, where, show(e));
      }
      for (const std::string* part : {&a, &b})
        if (!spec_.vocab.count(*part))
          fail_invalid("{}: {}: {} is not in the vocab", label_, where, quote(*part));
      // Hugging Face: the merged token drops b's continuing-subword prefix.
      std::string merged =
          a + (!prefix.empty() && b.starts_with(prefix) ? b.substr(prefix.size()) : b);
      if (!spec_.vocab.count(merged))
        fail_invalid("{}: {}: {} + {} makes {}, which is not in the vocab", label_, where, quote(a),
                     quote(b), quote(merged));
      std::string pair_key = a + '\0' + b;
      if (!seen.insert(std::move(pair_key)).second) {
        ++spec_.duplicate_merges;
        continue;
      }
      spec_.merges.emplace_back(std::move(a), std::move(b));
    }
  }

  void read_added(const json& root) {
    auto it = root.find("added_tokens");
    if (it == root.end() || it->is_null()) return;
    if (!it->is_array())
      fail_invalid("{}: added_tokens must be an array, got {}", label_, show(*it));
    check_count(it->size(), limits_.max_added, "added_tokens");
    std::unordered_map<std::string, size_t> by_content;
    std::unordered_map<uint32_t, size_t> by_id;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      std::string where = "added_tokens[" + std::to_string(i) + "]";
      auto named = [&where] { return where; };
      if (!e.is_object()) fail_invalid("{}: {}: must be an object, got {}", label_, where, show(e));
      AddedToken t;
      auto id = e.find("id");
      if (id == e.end()) fail_invalid("{}: {}: 'id' is missing", label_, where);
      t.id = uint32_t(id_value(*id, named));
      auto content = e.find("content");
      if (content == e.end() || !content->is_string())
        fail_invalid("{}: {}: 'content' is missing or not a string", label_, where);
      t.content = content->get<std::string>();
      where += " (" + quote(t.content) + ")";
      check_text(t.content, named);
      t.special = opt_bool(e, "special", false, where);
      t.lstrip = opt_bool(e, "lstrip", false, where);
      t.rstrip = opt_bool(e, "rstrip", false, where);
      t.single_word = opt_bool(e, "single_word", false, where);
      t.normalized = opt_bool(e, "normalized", !t.special, where);

      auto in_vocab = spec_.vocab.find(t.content);
      if (in_vocab != spec_.vocab.end() && in_vocab->second != t.id)
        fail_invalid("{}: {}: has id {} but the vocab gives it id {}", label_, where, t.id,
                     in_vocab->second);
      if (auto [prev, fresh] = by_content.emplace(t.content, i); !fresh)
        fail_invalid("{}: {}: the same text as added_tokens[{}]", label_, where, prev->second);
      if (auto [prev, fresh] = by_id.emplace(t.id, i); !fresh)
        fail_invalid("{}: {}: id {} is also the id of added_tokens[{}]", label_, where, t.id,
                     prev->second);
      assign(t.id, t.content, named);
      spec_.added_tokens.push_back(std::move(t));
    }
  }

  void check_count(size_t n, uint64_t limit, const char* what) {
    if (n > limit) fail_invalid("{}: {} {} is more than the limit of {}", label_, n, what, limit);
  }

  bool opt_bool(const json& obj, const char* key, bool dflt, const std::string& where = "model") {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_boolean())
      fail_invalid("{}: {}.{} must be true or false, got {}", label_, where, key, show(*it));
    return it->get<bool>();
  }

  std::optional<std::string> opt_string(const json& obj, const char* key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_string())
      fail_invalid("{}: model.{} must be a string or null, got {}", label_, key, show(*it));
    return it->get<std::string>();
  }

  const std::string& label_;
  const TokenizerLimits& limits_;
  TokenizerSpec spec_;
};

}  // namespace

const char* to_string(TokenizerModel m) {
  switch (m) {
    case TokenizerModel::kBPE:
      return "BPE";
    case TokenizerModel::kUnigram:
      return "Unigram";
    case TokenizerModel::kWordPiece:
      return "WordPiece";
    case TokenizerModel::kWordLevel:
      return "WordLevel";
  }
  return "?";
}

std::optional<uint32_t> TokenizerSpec::find(std::string_view text) const {
  auto it = vocab.find(std::string(text));
  if (it != vocab.end()) return it->second;
  for (const auto& t : added_tokens)
    if (t.content == text) return t.id;
  return std::nullopt;
}

const AddedToken* TokenizerSpec::find_added(uint32_t id) const {
  for (const auto& t : added_tokens)
    if (t.id == id) return &t;
  return nullptr;
}

TokenizerSpec parse_tokenizer_json(std::string_view text, const std::string& label,
                                   const TokenizerLimits& limits) {
  return SpecParser(label, limits).parse(text);
}

TokenizerSpec load_tokenizer_json(const std::string& path, const TokenizerLimits& limits) {
  MappedFile f = MappedFile::open(path);
  std::string_view text(reinterpret_cast<const char*>(f.data()), f.size());
  return parse_tokenizer_json(text, path, limits);
}

}  // namespace tandem
