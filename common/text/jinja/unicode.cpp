#include "common/text/jinja/unicode.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/text/jinja/case_map.h"

namespace tandem::text::jinja {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Decodes one code point at s[i], advancing i; invalid input gives U+FFFD
// and advances one byte.
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = 0;
  char32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    ++i;
    return 0xFFFD;
  }
  if (i + static_cast<size_t>(len) > s.size()) {
    ++i;
    return 0xFFFD;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF) {
    ++i;
    return 0xFFFD;
  }
  i += static_cast<size_t>(len);
  return cp;
}

bool is_ascii_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_code_point(s, i));
  return out;
}

std::u16string to_utf16(std::string_view s) {
  std::u16string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    if (cp >= 0x10000) {
      out.push_back(static_cast<char16_t>(0xD800 + ((cp - 0x10000) >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + ((cp - 0x10000) & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(cp));
    }
  }
  return out;
}

std::string from_utf16(std::u16string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char16_t u = s[i];
    if (u >= 0xD800 && u < 0xDC00 && i + 1 < s.size() && s[i + 1] >= 0xDC00 && s[i + 1] < 0xE000) {
      append_utf8(out, 0x10000 + ((static_cast<char32_t>(u) - 0xD800) << 10) +
                           (static_cast<char32_t>(s[i + 1]) - 0xDC00));
      ++i;
    } else {
      append_utf8(out, u);
    }
  }
  return out;
}

int64_t js_length(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) n += next_code_point(s, i) >= 0x10000 ? 2 : 1;
  return n;
}

std::optional<std::string> js_char_at(std::string_view s, int64_t index) {
  if (index < 0) index += js_length(s);
  if (index < 0) return std::nullopt;
  // Walk code points only as far as the index.
  int64_t unit = 0;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    const int64_t width = cp >= 0x10000 ? 2 : 1;
    if (index < unit + width) {
      std::string out;
      if (width == 1) {
        append_utf8(out, cp);
      } else {
        // Half of a surrogate pair, as JavaScript indexes it.
        const char32_t high = 0xD800 + ((cp - 0x10000) >> 10);
        const char32_t low = 0xDC00 + ((cp - 0x10000) & 0x3FF);
        append_utf8(out, index == unit ? high : low);
      }
      return out;
    }
    unit += width;
  }
  return std::nullopt;
}

std::vector<std::string> js_code_points(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    std::string one;
    append_utf8(one, next_code_point(s, i));
    out.push_back(std::move(one));
  }
  return out;
}

bool is_js_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string js_trim(std::string_view s, bool start, bool end) {
  size_t begin = 0;
  size_t stop = s.size();
  if (start) {
    while (begin < stop) {
      size_t next = begin;
      if (!is_js_space(next_code_point(s, next))) break;
      begin = next;
    }
  }
  if (end) {
    while (stop > begin) {
      // Step back over one code point (continuation bytes first).
      size_t prev = stop - 1;
      while (prev > begin && (static_cast<unsigned char>(s[prev]) & 0xC0) == 0x80) --prev;
      size_t probe = prev;
      const char32_t cp = next_code_point(s, probe);
      if (probe != stop || !is_js_space(cp)) break;
      stop = prev;
    }
  }
  return std::string(s.substr(begin, stop - begin));
}

std::string js_to_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, next_code_point(s, i));
  return out;
}

std::string js_to_lower(std::string_view s) {
  const std::u32string cps = decode_utf8(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    if (cps[i] == 0x03A3) {
      // Final sigma: after a cased letter and not before one.
      const bool after_letter = i > 0 && is_cased_letter(cps[i - 1]);
      const bool before_letter = i + 1 < cps.size() && is_cased_letter(cps[i + 1]);
      append_utf8(out, after_letter && !before_letter ? 0x03C2 : 0x03C3);
      continue;
    }
    append_lower(out, cps[i]);
  }
  return out;
}

std::string js_capitalize(std::string_view s) {
  if (s.empty()) return {};
  size_t i = 0;
  const char32_t first = next_code_point(s, i);
  std::string out;
  if (first < 0x10000) {
    append_upper(out, first);
  } else {
    append_utf8(out, first);
  }
  out.append(s.substr(i));
  return out;
}

std::string js_title(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    if (is_ascii_word(out[i]) && (i == 0 || !is_ascii_word(out[i - 1])) && out[i] >= 'a' &&
        out[i] <= 'z') {
      out[i] = static_cast<char>(out[i] - 'a' + 'A');
    }
  }
  return out;
}

std::string js_number_to_string(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0";
  std::string out;
  if (v < 0) {
    out.push_back('-');
    v = -v;
  }
  // Shortest round-trip digits in scientific form: d[.ddd]e[+-]x.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits.push_back(c);
  }
  int exp10 = 0;
  std::from_chars(sci.data() + epos + (sci[epos + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exp10);
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;  // value = 0.digits * 10^n
  if (k <= n && n <= 21) {
    out += digits;
    out.append(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<size_t>(n));
    out.push_back('.');
    out += digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-n), '0');
    out += digits;
  } else {
    out.push_back(digits[0]);
    if (k > 1) {
      out.push_back('.');
      out += digits.substr(1);
    }
    out.push_back('e');
    out.push_back(n - 1 >= 0 ? '+' : '-');
    out += std::to_string(std::abs(n - 1));
  }
  return out;
}

std::string js_json_quote(std::string_view s, bool ascii_only) {
  const std::u16string u = to_utf16(s);
  std::string out = "\"";
  for (size_t i = 0; i < u.size(); ++i) {
    const char16_t c = u[i];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    const bool high = c >= 0xD800 && c < 0xDC00;
    const bool low = c >= 0xDC00 && c < 0xE000;
    const bool paired = high && i + 1 < u.size() && u[i + 1] >= 0xDC00 && u[i + 1] < 0xE000;
    if (c < 0x20 || (ascii_only && c >= 0x7F)) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else if ((high && !paired) || low) {
      // JSON.stringify escapes lone surrogates (a low one after a high one
      // is consumed with it below).
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else if (paired) {
      out += from_utf16(u.substr(i, 2));
      ++i;
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back('"');
  return out;
}

namespace {

size_t skip_js_space(std::string_view s, size_t i) {
  while (i < s.size()) {
    size_t next = i;
    if (!is_js_space(next_code_point(s, next))) break;
    i = next;
  }
  return i;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of the longest StrDecimalLiteral prefix without sign at s[i]
// ("Infinity", digits, a fraction, an exponent); 0 when there is none.
size_t decimal_literal_length(std::string_view s, size_t i, bool& infinity) {
  infinity = false;
  if (s.substr(i, 8) == "Infinity") {
    infinity = true;
    return 8;
  }
  size_t j = i;
  size_t int_digits = 0;
  while (j < s.size() && is_digit(s[j])) ++j, ++int_digits;
  size_t frac_digits = 0;
  if (j < s.size() && s[j] == '.') {
    size_t f = j + 1;
    while (f < s.size() && is_digit(s[f])) ++f, ++frac_digits;
    if (int_digits + frac_digits > 0) j = f;
  }
  if (int_digits + frac_digits == 0) return 0;
  if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
    size_t e = j + 1;
    if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
    size_t exp_digits = 0;
    while (e < s.size() && is_digit(s[e])) ++e, ++exp_digits;
    if (exp_digits > 0) j = e;
  }
  return j - i;
}

double parse_decimal(std::string_view text) {
  double v = 0;
  std::string t(text);
  if (!t.empty() && t[0] == '.') t.insert(t.begin(), '0');
  const auto res = std::from_chars(t.data(), t.data() + t.size(), v);
  if (res.ec == std::errc::result_out_of_range) {
    // Overflow gives Infinity in JavaScript; underflow gives 0.
    const size_t e = t.find_first_of("eE");
    const bool neg_exp = e != std::string::npos && e + 1 < t.size() && t[e + 1] == '-';
    return neg_exp ? 0.0 : HUGE_VAL;
  }
  return v;
}

}  // namespace

std::optional<double> js_parse_int(std::string_view s) {
  size_t i = skip_js_space(s, 0);
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const size_t start = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == start) return std::nullopt;
  const double v = parse_decimal(s.substr(start, i - start));
  return negative ? -v : v;
}

std::optional<double> js_parse_float(std::string_view s) {
  size_t i = skip_js_space(s, 0);
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  bool infinity = false;
  const size_t len = decimal_literal_length(s, i, infinity);
  if (len == 0) return std::nullopt;
  const double v = infinity ? HUGE_VAL : parse_decimal(s.substr(i, len));
  return negative ? -v : v;
}

double js_string_to_number(std::string_view s) {
  const std::string t = js_trim(s, true, true);
  if (t.empty()) return 0;
  const std::string_view v(t);
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X' || v[1] == 'o' || v[1] == 'O' ||
                                      v[1] == 'b' || v[1] == 'B')) {
    const int base = (v[1] == 'x' || v[1] == 'X') ? 16 : (v[1] == 'o' || v[1] == 'O') ? 8 : 2;
    double acc = 0;
    for (char c : v.substr(2)) {
      int d = -1;
      if (is_digit(c)) d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0 || d >= base) return std::nan("");
      acc = acc * base + d;
    }
    return acc;
  }
  size_t i = 0;
  bool negative = false;
  if (v[0] == '+' || v[0] == '-') negative = v[i++] == '-';
  bool infinity = false;
  const size_t len = decimal_literal_length(v, i, infinity);
  if (len == 0 || i + len != v.size()) return std::nan("");
  const double r = infinity ? HUGE_VAL : parse_decimal(v.substr(i, len));
  return negative ? -r : r;
}

}  // namespace tandem::text::jinja
