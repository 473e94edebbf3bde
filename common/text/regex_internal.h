// Internal to the regex engine (regex.h): code point sets, the pattern reader
// shared by the parser (regex_parse.cpp) and the class parser
// (regex_class.cpp), and the syntax tree the parser hands to the compiler
// (regex.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/text/unicode.h"

namespace tandem::text::regex_detail {

// A set of code points as sorted, disjoint, non-adjacent inclusive ranges.
class CodePointSet {
 public:
  CodePointSet() = default;
  explicit CodePointSet(std::vector<CodePointRange> sorted_ranges);
  static CodePointSet single(char32_t cp) { return CodePointSet({{cp, cp}}); }
  static CodePointSet range(char32_t first, char32_t last) { return CodePointSet({{first, last}}); }
  static CodePointSet all() { return range(0, 0x10FFFF); }

  CodePointSet& operator|=(const CodePointSet& other);
  CodePointSet intersect(const CodePointSet& other) const;
  CodePointSet complement() const;
  bool contains(char32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  // Every code point (the whole range U+0000..U+10FFFF).
  bool is_all() const;
  const std::vector<CodePointRange>& ranges() const { return ranges_; }
  friend bool operator==(const CodePointSet&, const CodePointSet&) = default;

 private:
  std::vector<CodePointRange> ranges_;
};

enum class AssertKind : uint8_t {
  kLineStart,       // ^: at 0 or after \n
  kLineEnd,         // $: at the end or before \n
  kTextStart,       // \A
  kTextEnd,         // \z
  kTextEndNewline,  // \Z: at the end, or before a final \n
  kWordBoundary,    // \b
  kNotWordBoundary  // \B
};

struct Node {
  enum class Kind : uint8_t { kSet, kSeq, kAlt, kRepeat, kAssert, kLook, kEmpty };
  Kind kind = Kind::kEmpty;
  uint32_t set = 0;                // kSet: index into Ast::sets
  std::vector<uint32_t> children;  // kSeq, kAlt; kRepeat and kLook: one
  uint32_t min = 0, max = 0;       // kRepeat; max == kInfinite for no bound
  bool greedy = true;              // kRepeat
  AssertKind assertion = AssertKind::kLineStart;  // kAssert
  bool behind = false;             // kLook: lookbehind
  bool negate = false;             // kLook: (?! or (?<!
  bool quantifiable = true;        // JS forbids quantifiers on lookarounds, \A \z \Z
};
inline constexpr uint32_t kInfinite = UINT32_MAX;

struct Ast {
  std::vector<Node> nodes;
  std::vector<CodePointSet> sets;
  uint32_t root = 0;
  bool uses_word_boundary = false;  // \b or \B present: the compiler needs the \w set
};

inline bool is_ascii_letter(char32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
inline bool is_ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
inline std::string utf8(std::u32string_view s) { return encode_utf8(s); }

CodePointSet categories(uint32_t mask);  // union of general categories (category_bit)
CodePointSet property(BinaryProperty p);
CodePointSet hex_digits();  // \h: 0-9 A-F a-f
// \w inside a class in Hugging Face's rewrite: Alphabetic, marks, decimal
// digits, connector punctuation.
CodePointSet word_in_class_set();
// \w outside a class: the same plus ² ³ ¹ ¼ ½ ¾.
CodePointSet word_set();

// The pattern being parsed (after Hugging Face's Bloom fix-up), with error
// reporting and the escape forms both the parser and the class parser read.
class PatternText {
 public:
  PatternText(std::u32string_view text, std::string_view original) : text_(text), original_(original) {}

  size_t size() const { return text_.size(); }
  char32_t at(size_t i) const { return i < text_.size() ? text_[i] : 0; }  // 0 past the end
  bool starts_with(size_t i, std::u32string_view s) const {
    return i <= text_.size() && text_.substr(i).starts_with(s);
  }
  std::u32string_view substr(size_t i, size_t n) const { return text_.substr(i, n); }
  size_t find(char32_t c, size_t from) const { return text_.find(c, from); }

  // Throw tandem::Error naming `what`, the code point offset and the pattern.
  [[noreturn]] void invalid(size_t at, std::string_view what) const;      // node rejects it too
  [[noreturn]] void unsupported(size_t at, std::string_view what) const;  // node accepts it

  // \p{..} \P{..} \x{..} \u{..} at i (the rewrite's BRACED_ESCAPE_RE).
  bool braced_escape(size_t i, char32_t& kind, std::u32string_view& body, size_t& len) const;
  // The code point of a \x{..} / \u{..} body; nullopt when not hex or above U+10FFFF.
  std::optional<char32_t> braced_code_point(std::u32string_view body) const;
  // \xHH, \uHHHH (a following \uDCxx low surrogate joins a high one), \cX.
  bool fixed_width_escape(size_t i, char32_t& value, size_t& len) const;
  // The set of \p{body} (\P{body} when negate), as JS reads the name.
  CodePointSet property_set(std::u32string_view body, bool negate, size_t at) const;

 private:
  [[noreturn]] void error(ErrorKind kind, size_t at, std::string_view what) const;
  std::u32string_view text_;
  std::string_view original_;
};

struct ClassResult {
  CodePointSet set;
  size_t end = 0;  // just after the closing ]
  bool negated = false;
  bool complex = false;                 // holds a property, shorthand, POSIX class or nested set
  bool nested_negated_complex = false;  // for one of the rewrite's errors
};
// Parses the class whose '[' is at `start`; `fold`: inside (?i:...).
ClassResult parse_class(const PatternText& text, size_t start, bool fold);

// Parses an Oniguruma pattern (as tokenizer.json holds it) into the tree of
// the JS RegExp that Hugging Face's tokenizer builds from it (see
// regex_parse.cpp). `original` is the UTF-8 pattern, for error messages.
// Throws tandem::Error.
Ast parse(std::u32string_view pattern, std::string_view original);

}  // namespace tandem::text::regex_detail
