// Character classes and escapes of tokenizer.json patterns, read as Hugging
// Face's rewrite_oniguruma_to_js reads them (parse_character_class and
// rewrite_character_class_escape in @huggingface/tokenizers): operands joined
// by && intersect, nested classes and [:posix:] unite, a leading ] is
// literal, '-' makes a range only between two single code points. Each class
// becomes one set of code points; the rewrite's errors are kept (see
// regex_parse.cpp for the rest of the pattern).
#include <algorithm>
#include <iterator>
#include <optional>

#include "common/error.h"
#include "common/text/regex_internal.h"

namespace tandem::text::regex_detail {
namespace {

uint32_t hex_value(char32_t c) { return is_ascii_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }
bool is_hex_digit(char32_t c) {
  return is_ascii_digit(c) || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

// The general category value names and aliases JS accepts in \p{..}.
std::optional<uint32_t> category_by_name(std::u32string_view name) {
  struct Entry { const char32_t* short_name; const char32_t* long_name; const char32_t* alias; uint32_t mask; };
  using G = GeneralCategory;
  static constexpr Entry kEntries[] = {
      {U"L", U"Letter", nullptr, kLetterCategories},
      {U"LC", U"Cased_Letter", nullptr, kCasedLetterCategories},
      {U"Lu", U"Uppercase_Letter", nullptr, category_bit(G::kLu)},
      {U"Ll", U"Lowercase_Letter", nullptr, category_bit(G::kLl)},
      {U"Lt", U"Titlecase_Letter", nullptr, category_bit(G::kLt)},
      {U"Lm", U"Modifier_Letter", nullptr, category_bit(G::kLm)},
      {U"Lo", U"Other_Letter", nullptr, category_bit(G::kLo)},
      {U"M", U"Mark", U"Combining_Mark", kMarkCategories},
      {U"Mn", U"Nonspacing_Mark", nullptr, category_bit(G::kMn)},
      {U"Mc", U"Spacing_Mark", nullptr, category_bit(G::kMc)},
      {U"Me", U"Enclosing_Mark", nullptr, category_bit(G::kMe)},
      {U"N", U"Number", nullptr, kNumberCategories},
      {U"Nd", U"Decimal_Number", U"digit", category_bit(G::kNd)},
      {U"Nl", U"Letter_Number", nullptr, category_bit(G::kNl)},
      {U"No", U"Other_Number", nullptr, category_bit(G::kNo)},
      {U"P", U"Punctuation", U"punct", kPunctuationCategories},
      {U"Pc", U"Connector_Punctuation", nullptr, category_bit(G::kPc)},
      {U"Pd", U"Dash_Punctuation", nullptr, category_bit(G::kPd)},
      {U"Ps", U"Open_Punctuation", nullptr, category_bit(G::kPs)},
      {U"Pe", U"Close_Punctuation", nullptr, category_bit(G::kPe)},
      {U"Pi", U"Initial_Punctuation", nullptr, category_bit(G::kPi)},
      {U"Pf", U"Final_Punctuation", nullptr, category_bit(G::kPf)},
      {U"Po", U"Other_Punctuation", nullptr, category_bit(G::kPo)},
      {U"S", U"Symbol", nullptr, kSymbolCategories},
      {U"Sm", U"Math_Symbol", nullptr, category_bit(G::kSm)},
      {U"Sc", U"Currency_Symbol", nullptr, category_bit(G::kSc)},
      {U"Sk", U"Modifier_Symbol", nullptr, category_bit(G::kSk)},
      {U"So", U"Other_Symbol", nullptr, category_bit(G::kSo)},
      {U"Z", U"Separator", nullptr, kSeparatorCategories},
      {U"Zs", U"Space_Separator", nullptr, category_bit(G::kZs)},
      {U"Zl", U"Line_Separator", nullptr, category_bit(G::kZl)},
      {U"Zp", U"Paragraph_Separator", nullptr, category_bit(G::kZp)},
      {U"C", U"Other", nullptr, kOtherCategories},
      {U"Cc", U"Control", U"cntrl", category_bit(G::kCc)},
      {U"Cf", U"Format", nullptr, category_bit(G::kCf)},
      {U"Cs", U"Surrogate", nullptr, category_bit(G::kCs)},
      {U"Co", U"Private_Use", nullptr, category_bit(G::kCo)},
      {U"Cn", U"Unassigned", nullptr, category_bit(G::kCn)},
  };
  for (const Entry& e : kEntries) {
    if (name == e.short_name || name == e.long_name || (e.alias != nullptr && name == e.alias)) {
      return e.mask;
    }
  }
  return std::nullopt;
}

std::optional<CodePointSet> binary_property_by_name(std::u32string_view name) {
  if (name == U"Alphabetic" || name == U"Alpha") return property(BinaryProperty::kAlphabetic);
  if (name == U"White_Space" || name == U"space") return property(BinaryProperty::kWhiteSpace);
  if (name == U"Lowercase" || name == U"Lower") return property(BinaryProperty::kLowercase);
  if (name == U"Uppercase" || name == U"Upper") return property(BinaryProperty::kUppercase);
  if (name == U"Any") return CodePointSet::all();
  if (name == U"ASCII") return CodePointSet::range(0, 0x7F);
  if (name == U"Assigned") return categories(category_bit(GeneralCategory::kCn)).complement();
  return std::nullopt;
}

class ClassParser {
 public:
  ClassParser(const PatternText& text, bool fold) : t_(text), fold_(fold) {}
  ClassResult parse(size_t start, bool apply_fold, int depth);

 private:
  enum class Tail : uint8_t { kNone, kScalar, kSet, kRange, kCompleteRange };
  struct Operand {
    CodePointSet set;
    Tail tail = Tail::kNone;
    char32_t last_scalar = 0;
    bool complex = false;  // holds a property, shorthand, POSIX class or nested set
  };

  size_t class_escape(size_t i, Operand& op);
  void append_scalar(Operand& op, char32_t c, size_t at);
  void append_set(Operand& op, const CodePointSet& s, size_t at);
  void add_atom(Operand& op, const CodePointSet& s, size_t at, bool complex = true);

  const PatternText& t_;
  bool fold_;
};

void ClassParser::append_scalar(Operand& op, char32_t c, size_t at) {
  if (op.tail == Tail::kRange) {
    if (op.last_scalar > c) t_.invalid(at, "range out of order in character class");
    op.set |= CodePointSet::range(op.last_scalar, c);
    op.tail = Tail::kCompleteRange;
    return;
  }
  op.set |= CodePointSet::single(c);
  op.tail = Tail::kScalar;
  op.last_scalar = c;
}

void ClassParser::append_set(Operand& op, const CodePointSet& s, size_t at) {
  if (op.tail == Tail::kRange) t_.invalid(at, "range with a set-valued end in character class");
  op.set |= s;
  op.tail = Tail::kSet;
  op.complex = true;
}

void ClassParser::add_atom(Operand& op, const CodePointSet& s, size_t at, bool complex) {
  if (op.tail == Tail::kRange) t_.invalid(at, "range with a set-valued end in character class");
  op.set |= s;
  op.tail = Tail::kSet;
  op.complex = op.complex || complex;
}

size_t ClassParser::class_escape(size_t i, Operand& op) {
  char32_t kind;
  std::u32string_view body;
  size_t len;
  if (t_.braced_escape(i, kind, body, len)) {
    if (kind == 'x' || kind == 'u') {
      auto cp = t_.braced_code_point(body);
      if (!cp) t_.invalid(i, "invalid \\" + utf8(std::u32string(1, kind)) + "{...} escape");
      append_scalar(op, *cp, i);
    } else if (body == U"Word") {
      if (kind == 'P') add_atom(op, word_in_class_set().complement(), i);
      else append_set(op, word_in_class_set(), i);
    } else {
      append_set(op, t_.property_set(body, kind == 'P', i), i);
    }
    return i + len;
  }
  char32_t value;
  if (t_.fixed_width_escape(i, value, len)) {
    append_scalar(op, value, i);
    return i + len;
  }
  if (i + 1 >= t_.size()) t_.invalid(i, "unterminated escape in character class");
  const char32_t next = t_.at(i + 1);
  auto nd = [] { return categories(category_bit(GeneralCategory::kNd)); };
  switch (next) {
    case 'n': append_scalar(op, '\n', i); break;
    case 'r': append_scalar(op, '\r', i); break;
    case 't': append_scalar(op, '\t', i); break;
    case 'f': append_scalar(op, '\f', i); break;
    case 'v': append_scalar(op, '\v', i); break;
    case 'a': append_scalar(op, 0x07, i); break;
    case 'e': append_scalar(op, 0x1B, i); break;
    case 'b': append_scalar(op, 0x08, i); break;  // JS: backspace inside a class
    case 'W': add_atom(op, word_in_class_set().complement(), i); break;
    case 'H': add_atom(op, hex_digits().complement(), i); break;
    case 'h': append_set(op, hex_digits(), i); break;
    case 'w': append_set(op, word_in_class_set(), i); break;
    case 'd': append_set(op, nd(), i); break;
    case 'D': append_set(op, nd().complement(), i); break;
    case 's': append_set(op, property(BinaryProperty::kWhiteSpace), i); break;
    case 'S': append_set(op, property(BinaryProperty::kWhiteSpace).complement(), i); break;
    default:
      if (next == '0' && !is_ascii_digit(t_.at(i + 2))) {
        append_scalar(op, 0, i);
      } else if (is_ascii_letter(next) || is_ascii_digit(next)) {
        t_.invalid(i, "invalid escape '\\" + utf8(std::u32string(1, next)) + "' in character class");
      } else {
        append_scalar(op, next, i);
      }
  }
  return i + 2;
}

ClassResult ClassParser::parse(size_t start, bool apply_fold, int depth) {
  if (depth > 256) t_.invalid(start, "character classes nested more than 256 deep");
  size_t i = start + 1;
  const bool negated = t_.at(i) == '^';
  if (negated) ++i;
  const size_t first_content = i;
  std::vector<Operand> operands(1);
  bool nested_negated_complex = false;
  while (i < t_.size()) {
    Operand& op = operands.back();
    const char32_t c = t_.at(i);
    if (c == '\\') {
      i = class_escape(i, op);
      continue;
    }
    if (c == ']') {
      if (i == first_content) {  // []...] and [^]...]: a leading ] is literal
        append_scalar(op, ']', i);
        ++i;
        continue;
      }
      if (op.tail == Tail::kNone) {
        t_.invalid(i, operands.size() > 1 ? "empty operand of a class intersection" : "empty character class");
      }
      ClassResult r;
      r.complex = std::any_of(operands.begin(), operands.end(), [](const Operand& o) { return o.complex; });
      r.nested_negated_complex = nested_negated_complex;
      if (negated && operands.size() > 1 && nested_negated_complex) {
        t_.unsupported(start, "negated class intersection with a nested negated class holding a property, "
                           "POSIX class or shorthand (rejected by the Hugging Face rewrite)");
      }
      CodePointSet positive = operands[0].set;
      for (size_t k = 1; k < operands.size(); ++k) positive = positive.intersect(operands[k].set);
      if (fold_ && apply_fold) {
        // (?i:) reaches classes only for ASCII letters: add the other case of
        // a letter whose one case is in the class.
        for (char32_t u = 'A'; u <= 'Z'; ++u) {
          const bool has_upper = positive.contains(u), has_lower = positive.contains(u + 32);
          if (has_upper != has_lower) positive |= CodePointSet::single(has_upper ? u + 32 : u);
        }
      }
      r.set = negated ? positive.complement() : std::move(positive);
      r.negated = negated;
      r.end = i + 1;
      return r;
    }
    if (t_.starts_with(i, U"&&")) {
      if (op.tail == Tail::kNone) t_.invalid(i, "empty operand of a class intersection");
      operands.emplace_back();
      i += 2;
      continue;
    }
    if (c == '[') {
      if (t_.starts_with(i, U"[:^:]")) t_.invalid(i, "empty negated POSIX class");
      if (t_.at(i + 1) == ':') {
        const bool posix_negated = t_.at(i + 2) == '^';
        size_t j = i + 2 + (posix_negated ? 1 : 0);
        const size_t name_at = j;
        while (j < t_.size() && is_alphabetic(t_.at(j))) ++j;
        if (j > name_at && t_.at(j) == ':' && t_.at(j + 1) == ']') {
          const std::u32string_view name = t_.substr(name_at, j - name_at);
          CodePointSet s;
          const uint32_t punct_and_symbols = kPunctuationCategories | kSymbolCategories;
          if (name == U"alpha") s = property(BinaryProperty::kAlphabetic);
          else if (name == U"alnum") { s = property(BinaryProperty::kAlphabetic); s |= categories(category_bit(GeneralCategory::kNd)); }
          else if (name == U"digit") s = categories(category_bit(GeneralCategory::kNd));
          else if (name == U"lower") s = property(BinaryProperty::kLowercase);
          else if (name == U"upper") s = property(BinaryProperty::kUppercase);
          else if (name == U"space") s = property(BinaryProperty::kWhiteSpace);
          else if (name == U"blank") { s = categories(category_bit(GeneralCategory::kZs)); s |= CodePointSet::single('\t'); }
          else if (name == U"punct") s = categories(punct_and_symbols);
          else if (name == U"cntrl") s = categories(category_bit(GeneralCategory::kCc));
          else if (name == U"word") s = word_in_class_set();
          else if (name == U"xdigit") s = hex_digits();
          else t_.unsupported(i, "POSIX class [:" + utf8(name) + ":]");
          if (fold_ && posix_negated && (name == U"lower" || name == U"upper")) {
            t_.unsupported(i, "negated POSIX lower/upper class inside (?i:...)");
          }
          if (posix_negated) add_atom(op, s.complement(), i);
          else append_set(op, s, i);
          i = j + 2;
          continue;
        }
      }
      if (t_.at(i + 1) == '.' || t_.at(i + 1) == '=') {
        const char32_t mark = t_.at(i + 1);
        const size_t close = t_.find(']', i + 2);
        if (close != std::u32string_view::npos && close > i + 2 && t_.at(close - 1) == mark) {
          t_.unsupported(i, "POSIX collating or equivalence bracket");
        }
      }
      ClassResult nested = parse(i, false, depth + 1);
      add_atom(op, nested.set, i, nested.complex);
      nested_negated_complex = nested_negated_complex || nested.nested_negated_complex ||
                               (nested.negated && nested.complex);
      i = nested.end;
      continue;
    }
    if (c == '-') {
      const bool terminal = t_.at(i + 1) == ']' || t_.starts_with(i + 1, U"&&");
      if (op.tail == Tail::kSet && !terminal) t_.invalid(i, "range with a set-valued end in character class");
      if (op.tail == Tail::kScalar && !terminal) {
        op.tail = Tail::kRange;  // last_scalar starts the range
      } else {
        append_scalar(op, '-', i);
      }
      ++i;
      continue;
    }
    append_scalar(op, c, i);
    ++i;
  }
  t_.invalid(start, operands.size() > 1 ? "unterminated character-class intersection"
                                        : "unterminated character class");
}

}  // namespace

ClassResult parse_class(const PatternText& text, size_t start, bool fold) {
  return ClassParser(text, fold).parse(start, true, 1);
}

// ---- sets ---------------------------------------------------------------------
CodePointSet categories(uint32_t mask) { return CodePointSet(category_ranges(mask)); }
CodePointSet property(BinaryProperty p) { return CodePointSet(property_ranges(p)); }
CodePointSet hex_digits() { return CodePointSet({{'0', '9'}, {'A', 'F'}, {'a', 'f'}}); }

CodePointSet word_in_class_set() {
  CodePointSet s = property(BinaryProperty::kAlphabetic);
  s |= categories(kMarkCategories | category_bit(GeneralCategory::kNd) |
                  category_bit(GeneralCategory::kPc));
  return s;
}

CodePointSet word_set() {
  CodePointSet s = word_in_class_set();
  s |= CodePointSet({{0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}});
  return s;
}

CodePointSet::CodePointSet(std::vector<CodePointRange> sorted_ranges) : ranges_(std::move(sorted_ranges)) {}

CodePointSet& CodePointSet::operator|=(const CodePointSet& other) {
  std::vector<CodePointRange> merged;
  merged.reserve(ranges_.size() + other.ranges_.size());
  std::merge(ranges_.begin(), ranges_.end(), other.ranges_.begin(), other.ranges_.end(),
             std::back_inserter(merged),
             [](const CodePointRange& a, const CodePointRange& b) { return a.first < b.first; });
  ranges_.clear();
  for (const CodePointRange& r : merged) {
    if (!ranges_.empty() && r.first <= ranges_.back().last + 1) {
      ranges_.back().last = std::max(ranges_.back().last, r.last);
    } else {
      ranges_.push_back(r);
    }
  }
  return *this;
}

CodePointSet CodePointSet::intersect(const CodePointSet& other) const {
  std::vector<CodePointRange> out;
  size_t a = 0, b = 0;
  while (a < ranges_.size() && b < other.ranges_.size()) {
    const CodePointRange& x = ranges_[a];
    const CodePointRange& y = other.ranges_[b];
    const char32_t first = std::max(x.first, y.first), last = std::min(x.last, y.last);
    if (first <= last) out.push_back({first, last});
    if (x.last < y.last) ++a; else ++b;
  }
  return CodePointSet(std::move(out));
}

CodePointSet CodePointSet::complement() const {
  std::vector<CodePointRange> out;
  char32_t next = 0;
  for (const CodePointRange& r : ranges_) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.last + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return CodePointSet(std::move(out));
}

bool CodePointSet::contains(char32_t cp) const {
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), cp,
                             [](const CodePointRange& r, char32_t c) { return r.last < c; });
  return it != ranges_.end() && it->first <= cp;
}

bool CodePointSet::is_all() const {
  return ranges_.size() == 1 && ranges_[0].first == 0 && ranges_[0].last == 0x10FFFF;
}

// ---- PatternText ----------------------------------------------------------------
void PatternText::error(ErrorKind kind, size_t at, std::string_view what) const {
  std::string shown(original_.substr(0, 200));
  fail(kind, "regex: {} at code point {} of pattern \"{}{}\"", what, at, shown,
       original_.size() > 200 ? "..." : "");
}
void PatternText::invalid(size_t at, std::string_view what) const { error(ErrorKind::kInvalidInput, at, what); }
void PatternText::unsupported(size_t at, std::string_view what) const { error(ErrorKind::kUnsupported, at, what); }

std::optional<char32_t> PatternText::braced_code_point(std::u32string_view body) const {
  if (body.empty()) return std::nullopt;
  uint32_t v = 0;
  for (char32_t c : body) {
    if (!is_hex_digit(c)) return std::nullopt;
    v = v * 16 + hex_value(c);
    if (v > 0x10FFFF) return std::nullopt;
  }
  return v;
}

bool PatternText::braced_escape(size_t i, char32_t& kind, std::u32string_view& body, size_t& len) const {
  // The rewrite's BRACED_ESCAPE_RE: \p{..} \P{..} \x{..} \u{..}, body up to the first '}'.
  kind = at(i + 1);
  if ((kind != 'p' && kind != 'P' && kind != 'x' && kind != 'u') || at(i + 2) != '{') return false;
  const size_t close = text_.find('}', i + 3);
  if (close == std::u32string_view::npos) return false;
  body = text_.substr(i + 3, close - i - 3);
  len = close + 1 - i;
  return true;
}

bool PatternText::fixed_width_escape(size_t i, char32_t& value, size_t& len) const {
  // \xHH, \uHHHH, \cX (the rewrite's FIXED_WIDTH_ESCAPE_RE).
  const char32_t kind = at(i + 1);
  auto hex = [&](size_t from, size_t digits) -> std::optional<char32_t> {
    char32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      if (!is_hex_digit(at(from + k))) return std::nullopt;
      v = v * 16 + hex_value(at(from + k));
    }
    return v;
  };
  if (kind == 'c' && is_ascii_letter(at(i + 2))) {
    value = at(i + 2) % 32;
    len = 3;
    return true;
  }
  const size_t digits = kind == 'x' ? 2 : kind == 'u' ? 4 : 0;
  if (digits == 0) return false;
  auto v = hex(i + 2, digits);
  if (!v) return false;
  value = *v;
  len = 2 + digits;
  // In JS's unicode mode \uD83D\uDE00 is one code point.
  if (kind == 'u' && value >= 0xD800 && value <= 0xDBFF && at(i + 6) == '\\' && at(i + 7) == 'u') {
    if (auto low = hex(i + 8, 4); low && *low >= 0xDC00 && *low <= 0xDFFF) {
      value = 0x10000 + ((value - 0xD800) << 10) + (*low - 0xDC00);
      len = 12;
    }
  }
  return true;
}

CodePointSet PatternText::property_set(std::u32string_view body, bool negate, size_t at) const {
  std::optional<CodePointSet> s;
  const size_t eq = body.find('=');
  if (eq != std::u32string_view::npos) {
    const std::u32string_view name = body.substr(0, eq), value = body.substr(eq + 1);
    if (name == U"General_Category" || name == U"gc") {
      if (auto mask = category_by_name(value)) s = categories(*mask);
    } else if (name == U"Script" || name == U"sc" || name == U"Script_Extensions" || name == U"scx") {
      unsupported(at, "script property \\p{" + utf8(body) + "} (no script tables)");
    }
    if (!s) invalid(at, "unknown Unicode property \\p{" + utf8(body) + "}");
  } else if (auto mask = category_by_name(body)) {
    s = categories(*mask);
  } else {
    s = binary_property_by_name(body);
    if (!s) {
      // Node reads an unknown name as Script=name (Hugging Face's fallback);
      // neither scripts nor the rarer binary properties are tabled here.
      unsupported(at, "Unicode property \\p{" + utf8(body) +
                          "} (scripts and binary properties other than Alphabetic, White_Space, "
                          "Lowercase, Uppercase, Any, ASCII, Assigned are not supported)");
    }
  }
  return negate ? s->complement() : std::move(*s);
}

}  // namespace tandem::text::regex_detail
