// A small backtracking regex engine for tokenizer.json pre-tokenizer patterns
// (Split {"Regex": ...}, Oniguruma syntax), with the semantics of Hugging
// Face's JavaScript tokenizer: it rewrites the pattern to a JS RegExp with
// flags "gu", and this engine matches exactly what that RegExp matches on
// code points (see regex_parse.cpp for the rewrite rules).
//
// Supported: literals and escapes (\t \n \x41 \x{41} \u0041 \cA ...), ., classes
// with ranges, negation, nesting, && and [:posix:], \p{..} / \P{..} for general
// categories (short and long names, gc=..) and Alphabetic, White_Space,
// Lowercase, Uppercase, Any, ASCII, Assigned; \s \S \d \D \w \W \h \H;
// alternation; (...), (?:...), (?<name>...), (?>...), (?i:...) (ASCII
// letters, as the rewrite); greedy and lazy ? * + {n} {n,} {n,m} {,m};
// lookahead and lookbehind (any body); ^ $ \A \z \Z \b \B.
// Rejected with tandem::Error: back references, script properties (\p{Han}),
// other binary properties, inline flags other than (?i:...) (node rejects
// them too), and anything node's RegExp rejects.
//
// Known difference: V8 (node 20) can report a zero-width match made of
// lookarounds (what ^, $, \A, \z become) at a position inside a surrogate pair,
// i.e. in the middle of an astral character. Positions here are code points,
// so such matches do not exist; no tokenizer pattern seen so far can produce
// them. Like JS, matching is backtracking: a pattern with nested unbounded
// repetitions can take exponential time on hostile text.
//
// Matching runs a compiled program on an explicit backtracking stack (no
// recursion except into lookarounds), with single-character repetitions as
// one instruction holding a counter: \s+(?!\S) over 100k spaces is linear
// and needs constant stack.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::text {

namespace regex_detail {
struct Program;
}

class Regex {
 public:
  // Throws tandem::Error (kUnsupported or kInvalidInput) naming the construct
  // and its code point offset in the pattern.
  static Regex compile(std::string_view pattern_utf8);

  struct Match {
    size_t begin;  // code point indices into the text
    size_t end;
    friend bool operator==(const Match&, const Match&) = default;
  };

  // The leftmost match starting at or after `from` (JS RegExp.exec with
  // lastIndex = from), or nullopt.
  std::optional<Match> find(std::u32string_view text, size_t from = 0) const;

  // All successive non-overlapping leftmost matches, as JS
  // String.prototype.matchAll with flags "gu" (an empty match moves the next
  // search one code point on). Replaces the contents of `out`.
  void find_all(std::u32string_view text, std::vector<Match>& out) const;

  const std::string& pattern() const;

 private:
  explicit Regex(std::shared_ptr<const regex_detail::Program> program);
  // Immutable after compile: copies share it, and matching is thread-safe.
  std::shared_ptr<const regex_detail::Program> program_;
};

}  // namespace tandem::text
