#include "common/text/pre_tokenizer.h"

#include <array>

#include "common/error.h"
#include "common/text/unicode.h"

namespace tandem::text {
using nlohmann::json;

namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
// other 68 map to U+0100.. in byte order.
struct ByteTables {
  std::array<char32_t, 256> to_cp{};
  ByteTables() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
    }
  }
};
const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

// GPT-2's pattern, as ByteLevel uses it when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string escape_regex(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("^$\\.*+?()[]{}|/-").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string type_of(const json& config, const std::string& where, const std::string& label) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    fail_invalid("{}: {} must be an object with a string \"type\"", label, where);
  return config["type"].get<std::string>();
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) { return byte_tables().to_cp[b]; }

bool unicode_to_byte(char32_t cp, uint8_t* b) {
  if (cp < 256) {
    if (byte_tables().to_cp[cp] != cp) return false;
    *b = static_cast<uint8_t>(cp);
    return true;
  }
  if (cp >= 256 && cp < 256 + 68) {
    for (int i = 0; i < 256; ++i)
      if (byte_tables().to_cp[i] == cp) {
        *b = static_cast<uint8_t>(i);
        return true;
      }
  }
  return false;
}

PreTokenizer PreTokenizer::compile(const json& config, const std::string& label) {
  PreTokenizer p;
  if (!config.is_null()) p.add(config, "pre_tokenizer", label);
  return p;
}

bool PreTokenizer::byte_level() const {
  for (const Step& s : steps_)
    if (s.kind == Kind::kByteLevel) return true;
  return false;
}

void PreTokenizer::add_split(std::string pattern, Behavior b, bool invert, const std::string& where,
                             const std::string& label) {
  Step s{};
  s.kind = Kind::kSplit;
  s.behavior = b;
  s.invert = invert;
  try {
    s.regex = std::make_shared<const Regex>(Regex::compile(pattern));
  } catch (Error& e) {
    e.add_context(fmt::format("in {}: {}", label, where));
    throw;
  }
  steps_.push_back(std::move(s));
}

void PreTokenizer::add(const json& config, const std::string& where, const std::string& label) {
  const std::string type = type_of(config, where, label);
  if (type == "Sequence") {
    const json& list = config.contains("pretokenizers") ? config["pretokenizers"] : json();
    if (!list.is_array()) fail_invalid("{}: {}.pretokenizers must be an array", label, where);
    for (size_t i = 0; i < list.size(); ++i)
      if (!list[i].is_null())
        add(list[i], where + ".pretokenizers[" + std::to_string(i) + "]", label);
  } else if (type == "Split") {
    const json& p = config.contains("pattern") ? config["pattern"] : json();
    std::string pattern;
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
      pattern = p["Regex"].get<std::string>();
    else if (p.is_object() && p.contains("String") && p["String"].is_string())
      pattern = escape_regex(p["String"].get<std::string>());
    else
      fail_invalid("{}: {}.pattern must be {{\"Regex\": …}} or {{\"String\": …}}", label, where);
    const std::string behavior = config.value("behavior", std::string("Isolated"));
    Behavior b;
    if (behavior == "Removed") b = Behavior::kRemoved;
    else if (behavior == "Isolated") b = Behavior::kIsolated;
    else if (behavior == "MergedWithPrevious") b = Behavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") b = Behavior::kMergedWithNext;
    else if (behavior == "Contiguous") b = Behavior::kContiguous;
    else fail_invalid("{}: {}.behavior \"{}\" is not a split behaviour", label, where, behavior);
    add_split(pattern, b, config.value("invert", false), where, label);
  } else if (type == "ByteLevel") {
    const bool prefix = config.value("add_prefix_space", false);
    Step s{};
    s.kind = Kind::kByteLevel;
    if (config.value("use_regex", true)) {
      // GPT-2's split runs on the text with the prefix space already added;
      // the Split step carries the flag and the byte mapping follows it.
      add_split(kGpt2Pattern, Behavior::kIsolated, false, where, label);
      steps_.back().add_prefix_space = prefix;
    } else {
      s.add_prefix_space = prefix;
    }
    steps_.push_back(std::move(s));
  } else if (type == "Metaspace") {
    Step s{};
    s.kind = Kind::kMetaspace;
    s.replacement = decode_utf8(config.value("replacement", std::string("\u2581")));
    if (s.replacement.empty()) fail_invalid("{}: {}.replacement is empty", label, where);
    std::string scheme = config.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = config.value("add_prefix_space", true) ? "always" : "never";
    if (scheme == "always") s.prepend = 0;
    else if (scheme == "first") s.prepend = 1;
    else if (scheme == "never") s.prepend = 2;
    else fail_invalid("{}: {}.prepend_scheme \"{}\" is unknown", label, where, scheme);
    s.split = config.value("split", true);
    steps_.push_back(std::move(s));
  } else if (type == "Digits") {
    const bool individual = config.value("individual_digits", false);
    add_split(R"(\p{N})", individual ? Behavior::kIsolated : Behavior::kContiguous, false, where,
              label);
  } else if (type == "Punctuation") {
    add_split(R"([\p{P}\x21-\x2F\x3A-\x40\x5B-\x60\x7B-\x7E])", Behavior::kIsolated, false, where,
              label);
  } else if (type == "Whitespace") {
    add_split(R"(\w+|[^\w\s]+)", Behavior::kRemoved, true, where, label);
  } else if (type == "WhitespaceSplit") {
    add_split(R"(\s+)", Behavior::kRemoved, false, where, label);
  } else if (type == "BertPreTokenizer") {
    add_split(R"(\s+)", Behavior::kRemoved, false, where, label);
    add_split(R"([\p{P}\x21-\x2F\x3A-\x40\x5B-\x60\x7B-\x7E])", Behavior::kIsolated, false, where,
              label);
  } else {
    fail(ErrorKind::kUnsupported, "{}: {}: pre-tokenizer type \"{}\" is not supported", label,
         where, type);
  }
}

void PreTokenizer::run_split(const Step& s, const std::u32string& piece, Pieces& out) {
  // Segments covering the piece, each flagged as delimiter (the pattern's
  // matches, or the gaps between them when inverted).
  struct Seg {
    size_t begin, end;
    bool delim;
  };
  thread_local std::vector<Regex::Match> matches;
  matches.clear();
  s.regex->find_all(piece, matches);
  std::vector<Seg> segs;
  size_t prev = 0;
  for (const auto& m : matches) {
    if (m.begin > prev) segs.push_back({prev, m.begin, s.invert});
    segs.push_back({m.begin, m.end, !s.invert});
    prev = m.end;
  }
  if (prev < piece.size()) segs.push_back({prev, piece.size(), s.invert});

  std::vector<Seg> kept;
  switch (s.behavior) {
    case Behavior::kRemoved:
      for (const Seg& g : segs)
        if (!g.delim) kept.push_back(g);
      break;
    case Behavior::kIsolated:
      kept = segs;
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_delim = false;
      for (const Seg& g : segs) {
        if (g.delim && !prev_delim && !kept.empty()) kept.back().end = g.end;
        else kept.push_back(g);
        prev_delim = g.delim;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_delim = false;
      for (size_t i = segs.size(); i-- > 0;) {
        const Seg& g = segs[i];
        if (g.delim && !prev_delim && !kept.empty()) kept.back().begin = g.begin;
        else kept.push_back(g);
        prev_delim = g.delim;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_delim = false;
      for (const Seg& g : segs) {
        if (g.delim == prev_delim && !kept.empty()) kept.back().end = g.end;
        else kept.push_back(g);
        prev_delim = g.delim;
      }
      break;
    }
  }
  for (const Seg& g : kept)
    if (g.end > g.begin) out.push_back(piece.substr(g.begin, g.end - g.begin));
}

void PreTokenizer::run_byte_level(const Step& s, const std::u32string& piece, Pieces& out) {
  std::u32string src = piece;
  if (s.add_prefix_space && (src.empty() || src[0] != U' ')) src.insert(src.begin(), U' ');
  const std::string bytes = encode_utf8(src);
  std::u32string mapped;
  mapped.reserve(bytes.size());
  for (char c : bytes) mapped.push_back(byte_to_unicode(static_cast<uint8_t>(c)));
  out.push_back(std::move(mapped));
}

void PreTokenizer::run_metaspace(const Step& s, const std::u32string& piece, size_t section,
                                 Pieces& out) {
  std::u32string text;
  for (char32_t c : piece) {
    if (c == U' ') text += s.replacement;
    else text.push_back(c);
  }
  const bool starts = text.compare(0, s.replacement.size(), s.replacement) == 0;
  if (!starts && (s.prepend == 0 || (s.prepend == 1 && section == 0)))
    text.insert(0, s.replacement);
  if (!s.split) {
    out.push_back(std::move(text));
    return;
  }
  // Split before each replacement character (merged with the next word).
  size_t start = 0;
  for (size_t i = 1; i <= text.size(); ++i) {
    if (i == text.size() || text.compare(i, s.replacement.size(), s.replacement) == 0) {
      if (i > start) out.push_back(text.substr(start, i - start));
      start = i;
    }
  }
}

void PreTokenizer::split(std::string_view text, size_t section_index,
                         std::vector<std::string>& out) const {
  Pieces cur{decode_utf8(text)}, next;
  for (const Step& s : steps_) {
    next.clear();
    for (const auto& piece : cur) {
      switch (s.kind) {
        case Kind::kSplit:
          if (s.add_prefix_space && (piece.empty() || piece[0] != U' ')) {
            run_split(s, U" " + piece, next);
          } else {
            run_split(s, piece, next);
          }
          break;
        case Kind::kByteLevel: run_byte_level(s, piece, next); break;
        case Kind::kMetaspace: run_metaspace(s, piece, section_index, next); break;
      }
    }
    std::swap(cur, next);
  }
  for (const auto& piece : cur)
    if (!piece.empty()) out.push_back(encode_utf8(piece));
}

}  // namespace tandem::text
