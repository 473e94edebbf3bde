#include "common/text/jinja/json.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {
namespace {

// An "array index" key, which JavaScript objects order before all others.
std::optional<uint32_t> array_index(const std::string& key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= 0xFFFFFFFFull) return std::nullopt;
  return static_cast<uint32_t>(v);
}

Value convert(const nlohmann::ordered_json& j, std::string_view what, int depth) {
  if (depth > kMaxJsonDepth) fail_invalid("{}: nested deeper than {} levels", what, kMaxJsonDepth);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value(static_cast<int64_t>(u));
      }
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::json::value_t::binary: fail_invalid("{}: binary JSON values are not supported", what);
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(convert(item, what, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<uint32_t, const std::string*>> indexed;
      for (const auto& [key, _] : j.items()) {
        if (auto idx = array_index(key)) indexed.emplace_back(*idx, &key);
      }
      std::sort(indexed.begin(), indexed.end());
      Dict d;
      for (const auto& [_, key] : indexed) d.set(*key, convert(j.at(*key), what, depth + 1));
      for (const auto& [key, value] : j.items()) {
        if (!array_index(key)) d.set(key, convert(value, what, depth + 1));
      }
      return Value::dict(std::move(d));
    }
  }
  return Value::none();
}

// String.prototype.localeCompare (ICU's root collation) for sort_keys, for
// ASCII and Latin-1: ASCII in ICU's order (whitespace, punctuation and
// symbols, digits, letters), accented letters as their base letters, then
// accents, then case (lower first). Other characters sort after these by code
// point.
constexpr std::string_view kAsciiOrder =
    " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789aAbBcCdDeEfFgGhHiIjJkKlLmMnNoOpPqQrRsStTuUvVwWxXyYzZ";

// Base letters of U+00C0..U+00FF ("" for × and ÷, which are symbols).
constexpr std::string_view kLatin1Base[64] = {
    "a", "a", "a", "a", "a", "a", "ae", "c", "e", "e", "e", "e", "i", "i", "i", "i",
    "d", "n", "o", "o", "o", "o", "o", "",  "o", "u", "u", "u", "u", "y", "th", "ss",
    "a", "a", "a", "a", "a", "a", "ae", "c", "e", "e", "e", "e", "i", "i", "i", "i",
    "d", "n", "o", "o", "o", "o", "o", "",  "o", "u", "u", "u", "u", "y", "th", "y"};

struct CollationKey {
  std::vector<uint32_t> primary;
  std::vector<uint32_t> secondary;  // 0, or the accented code point
  std::vector<uint32_t> tertiary;   // 0 lower case, 1 upper case
};

CollationKey collation_key(const std::string& s) {
  CollationKey k;
  auto ascii = [&](char c, uint32_t accent, bool upper) {
    const size_t rank = kAsciiOrder.find(c);
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    // A letter's primary weight is its lower-case rank; case comes last.
    const size_t base = letter ? kAsciiOrder.find(static_cast<char>(c | 0x20)) : rank;
    k.primary.push_back(base == std::string_view::npos ? 0 : static_cast<uint32_t>(base) + 1);
    k.secondary.push_back(accent);
    k.tertiary.push_back(upper || (letter && c >= 'A' && c <= 'Z') ? 1 : 0);
  };
  for (char32_t cp : decode_utf8(s)) {
    if (cp < 0x80) {
      ascii(static_cast<char>(cp), 0, false);
    } else if (cp >= 0xC0 && cp <= 0xFF && !kLatin1Base[cp - 0xC0].empty()) {
      const bool upper = cp < 0xDF;
      const auto accent = static_cast<uint32_t>(upper ? cp + 0x20 : cp);  // the same for both cases
      for (char c : kLatin1Base[cp - 0xC0]) ascii(c, accent, upper);
    } else {
      k.primary.push_back(0x1000 + static_cast<uint32_t>(cp));
      k.secondary.push_back(0);
      k.tertiary.push_back(0);
    }
  }
  return k;
}

bool locale_less(const std::string& a, const std::string& b) {
  const CollationKey x = collation_key(a);
  const CollationKey y = collation_key(b);
  if (x.primary != y.primary) return x.primary < y.primary;
  if (x.secondary != y.secondary) return x.secondary < y.secondary;
  if (x.tertiary != y.tertiary) return x.tertiary < y.tertiary;
  return a < b;
}

struct Writer {
  const JsonOptions& options;
  bool undefined_as_null;
  std::string item_sep;
  std::string key_sep;
  std::string indent_unit;

  void write(std::string& out, const Value& v, int depth) {
    if (depth > kMaxJsonDepth) eval_fail("tojson: value nested deeper than {} levels", kMaxJsonDepth);
    if (out.size() > options.max_bytes) eval_fail("output larger than {} bytes", options.max_bytes);
    switch (v.kind()) {
      case ValueKind::kUndefined: out += undefined_as_null ? "null" : "undefined"; return;
      case ValueKind::kNone: out += "null"; return;
      case ValueKind::kBool: out += v.as_bool() ? "true" : "false"; return;
      case ValueKind::kInt: out += format_int(v.as_int()); return;
      case ValueKind::kFloat:
        out += std::isfinite(v.as_float()) ? js_number_to_string(v.as_float()) : "null";
        return;
      case ValueKind::kString: out += js_json_quote(v.as_string(), options.ensure_ascii); return;
      case ValueKind::kList:
        if (v.is_tuple()) eval_fail("cannot convert a tuple to JSON");
        write_list(out, v.items(), depth);
        return;
      case ValueKind::kDict:
      case ValueKind::kNamespace: write_dict(out, v.as_dict(), depth); return;
      case ValueKind::kCallable: eval_fail("cannot convert function '{}' to JSON", v.as_callable().name);
    }
  }

  std::string padding(int depth) const {
    std::string p = "\n";
    for (int i = 0; i < depth; ++i) p += indent_unit;
    return p;
  }

  void write_list(std::string& out, const std::vector<Value>& items, int depth) {
    const bool indented = !indent_unit.empty() && !items.empty();
    out.push_back('[');
    const std::string child = indented ? padding(depth + 1) : "";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_sep;
      out += child;
      write(out, items[i], depth + 1);
    }
    if (indented) out += padding(depth);
    out.push_back(']');
  }

  void write_dict(std::string& out, const Dict& d, int depth) {
    std::vector<const Dict::Entry*> entries;
    entries.reserve(d.size());
    for (const auto& e : d.entries()) entries.push_back(&e);
    if (options.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const Dict::Entry* a, const Dict::Entry* b) { return locale_less(a->first, b->first); });
    }
    const bool indented = !indent_unit.empty() && !entries.empty();
    const std::string child = indented ? padding(depth + 1) : "";
    out.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out += item_sep;
      out += child;
      out += js_json_quote(entries[i]->first, options.ensure_ascii);
      out += key_sep;
      write(out, entries[i]->second, depth + 1);
    }
    if (indented) out += padding(depth);
    out.push_back('}');
  }
};

}  // namespace

Value from_json(const nlohmann::ordered_json& j, std::string_view what) { return convert(j, what, 0); }

std::string to_json(const Value& v, const JsonOptions& options, bool undefined_as_null) {
  if (options.indent < 0) eval_fail("tojson: indent must not be negative, got {}", options.indent);
  if (options.indent > 1024) eval_fail("tojson: indent {} is too large (at most 1024)", options.indent);
  // (Built whole rather than assigned: GCC 12 warns falsely on assigning a
  // short literal to a std::string here.)
  std::string item_sep(options.separators ? options.separators->first : options.indent > 0 ? "," : ", ");
  std::string key_sep(options.separators ? options.separators->second : ": ");
  Writer w{options, undefined_as_null, std::move(item_sep), std::move(key_sep),
           std::string(static_cast<size_t>(options.indent), ' ')};
  std::string out;
  w.write(out, v, 0);
  if (out.size() > options.max_bytes) eval_fail("output larger than {} bytes", options.max_bytes);
  return out;
}

}  // namespace tandem::text::jinja
