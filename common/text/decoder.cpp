#include "common/text/decoder.h"

#include "common/error.h"
#include "common/text/normalizer.h"
#include "common/text/pre_tokenizer.h"
#include "common/text/unicode.h"

namespace tandem::text {
using nlohmann::json;

namespace {

// "<0x41>" -> 0x41.
bool parse_byte_token(const std::string& t, uint8_t* b) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return false;
  *b = static_cast<uint8_t>(hi * 16 + lo);
  return true;
}

// Maps a byte-level token back to its bytes; characters that are not
// stand-ins keep their UTF-8.
void append_byte_level(std::string& out, std::string_view token) {
  for (char32_t cp : decode_utf8(token)) {
    uint8_t b;
    if (unicode_to_byte(cp, &b)) out.push_back(static_cast<char>(b));
    else append_utf8(out, cp);
  }
}

}  // namespace

std::string clean_up_tokenization(std::string_view text) {
  std::string s(text);
  for (auto [from, to] : {std::pair{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","},
                          {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                          {" 've", "'ve"}, {" 're", "'re"}})
    replace_all(s, from, to);
  return s;
}

Decoder Decoder::compile(const json& config, const std::string& label) {
  Decoder d;
  if (!config.is_null()) {
    d.null_ = false;
    d.add(config, "decoder", label);
  }
  return d;
}

void Decoder::add(const json& config, const std::string& where, const std::string& label) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    fail_invalid("{}: {} must be an object with a string \"type\"", label, where);
  const std::string type = config["type"].get<std::string>();
  Step s{};
  if (type == "Sequence") {
    const json& list = config.contains("decoders") ? config["decoders"] : json();
    if (!list.is_array()) fail_invalid("{}: {}.decoders must be an array", label, where);
    for (size_t i = 0; i < list.size(); ++i)
      if (!list[i].is_null()) add(list[i], where + ".decoders[" + std::to_string(i) + "]", label);
    return;
  } else if (type == "ByteLevel") {
    s.kind = Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    s.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    s.kind = Kind::kFuse;
  } else if (type == "Strip") {
    s.kind = Kind::kStrip;
    s.a = config.value("content", std::string(" "));
    s.start = config.value("start", size_t{0});
    s.stop = config.value("stop", size_t{0});
  } else if (type == "Replace") {
    s.kind = Kind::kReplace;
    const json& p = config.contains("pattern") ? config["pattern"] : json();
    s.b = config.value("content", std::string());
    if (p.is_object() && p.contains("String") && p["String"].is_string()) {
      s.a = p["String"].get<std::string>();
    } else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
      s.regex = std::make_shared<const Regex>(Regex::compile(p["Regex"].get<std::string>()));
    } else {
      fail_invalid("{}: {}.pattern must be {{\"String\": …}} or {{\"Regex\": …}}", label, where);
    }
  } else if (type == "Metaspace") {
    s.kind = Kind::kMetaspace;
    s.a = config.value("replacement", std::string("\u2581"));
    std::string scheme = config.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = config.value("add_prefix_space", true) ? "always" : "never";
    s.flag = scheme != "never";
  } else if (type == "WordPiece") {
    s.kind = Kind::kWordPiece;
    s.a = config.value("prefix", std::string("##"));
    s.flag = config.value("cleanup", true);
  } else if (type == "BPEDecoder") {
    s.kind = Kind::kBpe;
    s.a = config.value("suffix", std::string("</w>"));
  } else {
    fail(ErrorKind::kUnsupported, "{}: {}: decoder type \"{}\" is not supported", label, where,
         type);
  }
  steps_.push_back(std::move(s));
}

std::string Decoder::decode(std::vector<DecodePiece> pieces) const {
  if (null_) {
    std::string out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i) out += ' ';
      out += pieces[i].text;
    }
    return out;
  }
  std::vector<DecodePiece> next;
  for (const Step& s : steps_) {
    next.clear();
    switch (s.kind) {
      case Kind::kByteLevel:
        // Runs of ordinary tokens become their bytes; added tokens stay text.
        for (auto& p : pieces) {
          if (p.added) {
            next.push_back(std::move(p));
            continue;
          }
          if (next.empty() || next.back().added) next.push_back(DecodePiece{});
          append_byte_level(next.back().text, p.text);
        }
        break;
      case Kind::kByteFallback: {
        // A run of <0xXX> tokens becomes one piece holding those bytes.
        bool in_run = false;
        for (auto& p : pieces) {
          uint8_t b;
          if (!p.added && parse_byte_token(p.text, &b)) {
            if (!in_run) next.push_back(DecodePiece{});
            next.back().text.push_back(static_cast<char>(b));
            in_run = true;
          } else {
            next.push_back(std::move(p));
            in_run = false;
          }
        }
        break;
      }
      case Kind::kFuse: {
        DecodePiece all;
        for (auto& p : pieces) all.text += p.text;
        next.push_back(std::move(all));
        break;
      }
      case Kind::kStrip:
        for (auto& p : pieces) {
          std::string_view t = p.text;
          for (size_t i = 0; i < s.start && !s.a.empty() && t.substr(0, s.a.size()) == s.a; ++i)
            t.remove_prefix(s.a.size());
          for (size_t i = 0; i < s.stop && !s.a.empty() && t.size() >= s.a.size() &&
                             t.substr(t.size() - s.a.size()) == s.a;
               ++i)
            t.remove_suffix(s.a.size());
          next.push_back(DecodePiece{std::string(t), p.added});
        }
        break;
      case Kind::kReplace:
        for (auto& p : pieces) {
          if (s.regex) p.text = regex_replace_all(*s.regex, p.text, s.b);
          else replace_all(p.text, s.a, s.b);
          next.push_back(std::move(p));
        }
        break;
      case Kind::kMetaspace:
        for (size_t i = 0; i < pieces.size(); ++i) {
          auto& p = pieces[i];
          replace_all(p.text, s.a, " ");
          if (i == 0 && s.flag && !p.text.empty() && p.text[0] == ' ') p.text.erase(0, 1);
          next.push_back(std::move(p));
        }
        break;
      case Kind::kWordPiece:
        for (size_t i = 0; i < pieces.size(); ++i) {
          auto& p = pieces[i];
          if (i != 0) {
            if (!s.a.empty() && p.text.compare(0, s.a.size(), s.a) == 0) p.text.erase(0, s.a.size());
            else p.text.insert(0, " ");
          }
          if (s.flag) p.text = clean_up_tokenization(p.text);
          next.push_back(std::move(p));
        }
        break;
      case Kind::kBpe:
        for (size_t i = 0; i < pieces.size(); ++i) {
          auto& p = pieces[i];
          replace_all(p.text, s.a, i + 1 == pieces.size() ? "" : " ");
          next.push_back(std::move(p));
        }
        break;
    }
    std::swap(pieces, next);
  }
  std::string out;
  for (const auto& p : pieces) out += p.text;
  return out;
}

}  // namespace tandem::text
