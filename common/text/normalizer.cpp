#include "common/text/normalizer.h"

#include "common/error.h"
#include "common/text/unicode.h"

namespace tandem::text {
using nlohmann::json;

namespace {

std::string type_of(const json& config, const std::string& where, const std::string& label) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    fail_invalid("{}: {} must be an object with a string \"type\"", label, where);
  return config["type"].get<std::string>();
}

// Decodes the code point at s[i] (s is valid UTF-8 here) and its length.
char32_t next_cp(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  n = std::min(n, s.size() - i);
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return cp;
}

// Start of the code point that ends at s[end-1].
size_t prev_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80 && end - i < 4) --i;
  return i;
}

}  // namespace

bool is_js_trim_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D:
    case 0xFEFF: case 0x2028: case 0x2029:
      return true;
    default:
      return general_category(cp) == GeneralCategory::kZs;
  }
}

std::string_view js_trim_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t n;
    if (!is_js_trim_space(next_cp(s, i, &n))) break;
    i += n;
  }
  return s.substr(i);
}

std::string_view js_trim_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t start = prev_start(s, end);
    size_t n;
    if (!is_js_trim_space(next_cp(s, start, &n))) break;
    end = start;
  }
  return s.substr(0, end);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

std::string regex_replace_all(const Regex& re, std::string_view text, std::string_view content) {
  const std::u32string cps = decode_utf8(text);
  std::vector<Regex::Match> matches;
  re.find_all(cps, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (const auto& m : matches) {
    out += encode_utf8(std::u32string_view(cps).substr(pos, m.begin - pos));
    out += content;
    pos = m.end;
  }
  out += encode_utf8(std::u32string_view(cps).substr(pos));
  return out;
}

Normalizer Normalizer::compile(const json& config, const std::string& label) {
  Normalizer n;
  if (!config.is_null()) n.add(config, "normalizer", label);
  return n;
}

void Normalizer::add(const json& config, const std::string& where, const std::string& label) {
  const std::string type = type_of(config, where, label);
  if (type == "Sequence") {
    const json& list = config.contains("normalizers") ? config["normalizers"] : json();
    if (!list.is_array()) fail_invalid("{}: {}.normalizers must be an array", label, where);
    for (size_t i = 0; i < list.size(); ++i)
      if (!list[i].is_null()) add(list[i], where + ".normalizers[" + std::to_string(i) + "]", label);
    return;
  }
  Step s{};
  if (type == "NFC") {
    s.kind = Kind::kNfc;
  } else if (type == "NFD") {
    s.kind = Kind::kNfd;
  } else if (type == "NFKC") {
    s.kind = Kind::kNfkc;
  } else if (type == "NFKD") {
    s.kind = Kind::kNfkd;
  } else if (type == "StripAccents") {
    s.kind = Kind::kStripAccents;
  } else if (type == "Prepend") {
    if (!config.contains("prepend") || !config["prepend"].is_string())
      fail_invalid("{}: {}.prepend must be a string", label, where);
    s.kind = Kind::kPrepend;
    s.a = config["prepend"].get<std::string>();
  } else if (type == "Strip") {
    s.kind = Kind::kStrip;
    s.left = config.value("strip_left", false);
    s.right = config.value("strip_right", false);
  } else if (type == "Replace") {
    const json& p = config.contains("pattern") ? config["pattern"] : json();
    const json& c = config.contains("content") ? config["content"] : json("");
    if (!c.is_string()) fail_invalid("{}: {}.content must be a string", label, where);
    s.b = c.get<std::string>();
    if (p.is_object() && p.contains("String") && p["String"].is_string()) {
      s.kind = Kind::kReplaceString;
      s.a = p["String"].get<std::string>();
    } else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
      s.kind = Kind::kReplaceRegex;
      try {
        s.regex = std::make_shared<const Regex>(Regex::compile(p["Regex"].get<std::string>()));
      } catch (Error& e) {
        e.add_context(fmt::format("in {}: {}.pattern", label, where));
        throw;
      }
    } else {
      fail_invalid("{}: {}.pattern must be {{\"String\": …}} or {{\"Regex\": …}}", label, where);
    }
  } else {
    fail(ErrorKind::kUnsupported, "{}: {}: normalizer type \"{}\" is not supported", label, where,
         type);
  }
  steps_.push_back(std::move(s));
}

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Kind::kNfc: cur = nfc(cur); break;
      case Kind::kNfd: cur = nfd(cur); break;
      case Kind::kNfkc: cur = nfkc(cur); break;
      case Kind::kNfkd: cur = nfkd(cur); break;
      case Kind::kPrepend: cur.insert(0, s.a); break;
      case Kind::kStrip: {
        std::string_view v = cur;
        if (s.left) v = js_trim_start(v);
        if (s.right) v = js_trim_end(v);
        cur = std::string(v);
        break;
      }
      case Kind::kStripAccents: {
        // Removes every combining mark (\p{M}), as Hugging Face's JS does.
        std::u32string cps = decode_utf8(cur);
        std::u32string kept;
        kept.reserve(cps.size());
        for (char32_t cp : cps) {
          const auto gc = general_category(cp);
          if (gc != GeneralCategory::kMn && gc != GeneralCategory::kMc &&
              gc != GeneralCategory::kMe)
            kept.push_back(cp);
        }
        cur = encode_utf8(kept);
        break;
      }
      case Kind::kReplaceString: replace_all(cur, s.a, s.b); break;
      case Kind::kReplaceRegex: cur = regex_replace_all(*s.regex, cur, s.b); break;
    }
  }
  return cur;
}

}  // namespace tandem::text
