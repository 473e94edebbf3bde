// Parser for tokenizer.json Split patterns. Hugging Face's JavaScript
// tokenizer does not run Oniguruma: it rewrites the pattern to a JS RegExp
// (rewrite_oniguruma_to_js in @huggingface/tokenizers) and compiles it with
// flags "gu". To match it, this parser follows that rewrite step by step and
// then applies the JS rules to the result, building the tree of the RegExp JS
// would run. What the rewrite does, and so what this parser does:
// - \s \S = White_Space, \d \D = Nd, \w = Alphabetic + M + Nd + Pc (plus
//   ² ³ ¹ ¼ ½ ¾ outside a class), \h = hex digit, \A \z \Z \b \B as
//   assertions, \G ignored, \a \e, \x{..}, . = anything but \n, ^ and $ at
//   lines (\n only).
// - (?i:..) folds ASCII letters only ([aA]); other case-insensitive syntax,
//   like every (?x..) JS does not know, is rejected as node rejects it.
// - (?>..) is an ordinary group; a + after a quantifier (possessive) is
//   dropped; {n,m} followed by + or * repeats the whole {n,m}; a { that is not
//   a quantifier, or that follows no atom, is a literal.
// - classes (regex_class.cpp): nesting, && intersection and [:posix:] become
//   set operations; the rewrite's errors (a range with a set as an end, an
//   empty operand ...) are kept.
// - the Bloom fix-up: [^(\s|[xyz])] is read as [^()|\sxyz].
// Errors carry the code point offset in the pattern; kUnsupported where JS
// would accept the pattern but this engine does not (back references, script
// properties), kInvalidInput where node would throw.
#include <algorithm>
#include <optional>

#include "common/error.h"
#include "common/text/regex_internal.h"

namespace tandem::text::regex_detail {
namespace {

CodePointSet ascii_folded(char32_t c) {
  CodePointSet s = CodePointSet::single(c | 0x20);
  s |= CodePointSet::single(c & ~char32_t{0x20});
  return s;
}

class Parser {
 public:
  Parser(std::u32string_view pattern, std::string_view original) : t_(pattern, original) {}

  Ast run();

 private:
  enum class GroupKind : uint8_t { kPlain, kLookahead, kNegLookahead, kLookbehind, kNegLookbehind };
  struct Frame {
    GroupKind kind = GroupKind::kPlain;
    std::vector<uint32_t> alternatives;
    std::vector<uint32_t> seq;
    bool saved_fold = false;
    size_t open_at = 0;
  };
  // After a quantifier JS accepts one '?' (lazy); the rewrite drops any '+'.
  enum class Quant : uint8_t { kNone, kQuantified, kLazy };

  [[noreturn]] void invalid(size_t at, std::string_view what) const { t_.invalid(at, what); }
  [[noreturn]] void unsupported(size_t at, std::string_view what) const { t_.unsupported(at, what); }
  bool starts_with(size_t i, std::u32string_view s) const { return t_.starts_with(i, s); }
  char32_t at(size_t i) const { return t_.at(i); }

  uint32_t add_node(Node n) {
    ast_.nodes.push_back(std::move(n));
    return static_cast<uint32_t>(ast_.nodes.size() - 1);
  }
  uint32_t set_node(CodePointSet s) {
    ast_.sets.push_back(std::move(s));
    Node n;
    n.kind = Node::Kind::kSet;
    n.set = static_cast<uint32_t>(ast_.sets.size() - 1);
    return add_node(std::move(n));
  }
  void emit(uint32_t node) {
    frames_.back().seq.push_back(node);
    has_atom_ = true;
    quant_ = Quant::kNone;
  }
  void emit_set(CodePointSet s) { emit(set_node(std::move(s))); }
  void emit_literal(char32_t c, bool may_fold) {
    emit_set(may_fold && fold_ && is_ascii_letter(c) ? ascii_folded(c) : CodePointSet::single(c));
  }
  void emit_assert(AssertKind kind, bool quantifiable) {
    Node n;
    n.kind = Node::Kind::kAssert;
    n.assertion = kind;
    n.quantifiable = quantifiable;
    if (kind == AssertKind::kWordBoundary || kind == AssertKind::kNotWordBoundary) {
      ast_.uses_word_boundary = true;
    }
    emit(add_node(std::move(n)));
  }
  uint32_t alternation(std::vector<uint32_t> alternatives, std::vector<uint32_t> seq) {
    // (?:x) is x: keeps (?:\s)+ a single-instruction repetition. Not for
    // lookarounds, which JS lets a group quantify but not themselves.
    if (alternatives.empty() && seq.size() == 1 && ast_.nodes[seq[0]].quantifiable) return seq[0];
    Node s;
    s.kind = Node::Kind::kSeq;
    s.children = std::move(seq);
    alternatives.push_back(add_node(std::move(s)));
    if (alternatives.size() == 1) return alternatives[0];
    Node a;
    a.kind = Node::Kind::kAlt;
    a.children = std::move(alternatives);
    return add_node(std::move(a));
  }

  void quantify(size_t at, uint32_t min, uint32_t max);
  void parse_brace(size_t& i);
  void open_group(size_t& i);
  void close_group(size_t& i);
  void parse_escape(size_t& i);

  PatternText t_;
  Ast ast_;
  std::vector<Frame> frames_;
  std::vector<std::u32string> group_names_;
  bool fold_ = false;
  bool has_atom_ = false;  // the rewrite's atom_start >= 0: decides whether { quantifies
  Quant quant_ = Quant::kNone;
};

Ast Parser::run() {
  frames_.emplace_back();
  size_t i = 0;
  while (i < t_.size()) {
    const char32_t c = t_.at(i);
    switch (c) {
      case '\\': parse_escape(i); break;
      case '[': {
        ClassResult r = parse_class(t_, i, fold_);
        emit_set(std::move(r.set));
        i = r.end;
        break;
      }
      case '.': emit_set(CodePointSet::single('\n').complement()); ++i; break;
      case '^': emit_assert(AssertKind::kLineStart, true); ++i; break;
      case '$': emit_assert(AssertKind::kLineEnd, true); ++i; break;
      case '(': open_group(i); break;
      case ')': close_group(i); break;
      case '|':
        frames_.back().alternatives.push_back(alternation({}, std::move(frames_.back().seq)));
        frames_.back().seq.clear();
        has_atom_ = false;
        quant_ = Quant::kNone;
        ++i;
        break;
      case '{': parse_brace(i); break;
      case '*':
        if (quant_ != Quant::kNone) invalid(i, "nothing to repeat for '*'");
        quantify(i, 0, kInfinite);
        ++i;
        break;
      case '+':
        if (quant_ == Quant::kNone) quantify(i, 1, kInfinite);  // else possessive: dropped
        ++i;
        break;
      case '?':
        if (quant_ == Quant::kQuantified) {
          ast_.nodes[frames_.back().seq.back()].greedy = false;
          quant_ = Quant::kLazy;
        } else if (quant_ == Quant::kLazy) {
          invalid(i, "nothing to repeat for '?'");
        } else {
          quantify(i, 0, 1);
        }
        ++i;
        break;
      default: emit_literal(c, true); ++i; break;  // ']' and '}' included
    }
  }
  if (frames_.size() > 1) invalid(frames_.back().open_at, "unterminated group");
  Frame& f = frames_.back();
  ast_.root = alternation(std::move(f.alternatives), std::move(f.seq));
  return std::move(ast_);
}

void Parser::quantify(size_t at, uint32_t min, uint32_t max) {
  std::vector<uint32_t>& seq = frames_.back().seq;
  if (seq.empty()) invalid(at, "nothing to repeat");
  if (!ast_.nodes[seq.back()].quantifiable) invalid(at, "quantifier after an assertion");
  Node r;
  r.kind = Node::Kind::kRepeat;
  r.children = {seq.back()};
  r.min = min;
  r.max = max;
  seq.back() = add_node(std::move(r));
  quant_ = Quant::kQuantified;
}

void Parser::parse_brace(size_t& i) {
  // The rewrite's QUANTIFIER_BRACE_RE: {n}, {n,}, {n,m}, {,m}.
  size_t j = i + 1;
  auto number = [&](uint64_t& v) {
    const size_t from = j;
    v = 0;
    while (is_ascii_digit(at(j))) v = std::min<uint64_t>(v * 10 + (at(j++) - '0'), 1u << 31);
    return j > from;
  };
  uint64_t lo = 0, hi = 0;
  bool ok;
  bool open_ended = false;
  if (at(j) == ',') {
    ++j;
    ok = number(hi);
  } else {
    ok = number(lo);
    hi = lo;
    if (ok && at(j) == ',') {
      ++j;
      open_ended = !number(hi);
    }
  }
  ok = ok && at(j) == '}';
  if (!ok || !has_atom_) {
    emit_literal('{', false);
    ++i;
    return;
  }
  if (quant_ != Quant::kNone) invalid(i, "nothing to repeat for '{'");
  if (!open_ended && lo > hi) invalid(i, "numbers out of order in {} quantifier");
  constexpr uint64_t kMaxCount = 100000;
  if (lo > kMaxCount || (!open_ended && hi > kMaxCount)) {
    unsupported(i, "repetition count above 100000");
  }
  quantify(i, static_cast<uint32_t>(lo), open_ended ? kInfinite : static_cast<uint32_t>(hi));
  i = j + 1;
  if (at(i) == '+' || at(i) == '*') {
    // Oniguruma reads a{2}+ as (?:a{2})+, not as possessive; so does the rewrite.
    const bool plus = at(i) == '+';
    quant_ = Quant::kNone;
    quantify(i, plus ? 1 : 0, kInfinite);
    ++i;
  }
}

void Parser::open_group(size_t& i) {
  Frame f;
  f.open_at = i;
  f.saved_fold = fold_;
  size_t len = 1;
  if (starts_with(i, U"(?i:")) {
    fold_ = true;
    len = 4;
  } else if (starts_with(i, U"(?:") || starts_with(i, U"(?>")) {
    len = 3;  // atomic groups are plain groups in the rewrite
  } else if (starts_with(i, U"(?=")) {
    f.kind = GroupKind::kLookahead;
    len = 3;
  } else if (starts_with(i, U"(?!")) {
    f.kind = GroupKind::kNegLookahead;
    len = 3;
  } else if (starts_with(i, U"(?<=")) {
    f.kind = GroupKind::kLookbehind;
    len = 4;
  } else if (starts_with(i, U"(?<!")) {
    f.kind = GroupKind::kNegLookbehind;
    len = 4;
  } else if (starts_with(i, U"(?<") && (is_ascii_letter(at(i + 3)) || at(i + 3) == '_')) {
    size_t j = i + 4;
    while (is_ascii_letter(at(j)) || is_ascii_digit(at(j)) || at(j) == '_') ++j;
    if (at(j) != '>') unsupported(i, "group name with characters other than [A-Za-z0-9_]");
    std::u32string name(t_.substr(i + 3, j - i - 3));
    if (std::find(group_names_.begin(), group_names_.end(), name) != group_names_.end()) {
      invalid(i, "duplicate group name '" + utf8(name) + "'");
    }
    group_names_.push_back(std::move(name));
    len = j + 1 - i;
  } else if (at(i + 1) == '?') {
    if (i + 2 >= t_.size() || (at(i + 2) == '<' && i + 3 >= t_.size())) invalid(i, "unterminated group");
    unsupported(i, "group syntax '(?" + utf8(t_.substr(i + 2, 1)) +
                       "' (node's RegExp has no inline flags or comments; only (?i:...) is rewritten)");
  }
  if (frames_.size() > 1000) unsupported(i, "groups nested more than 1000 deep");
  frames_.push_back(std::move(f));
  quant_ = Quant::kNone;
  i += len;
}

void Parser::close_group(size_t& i) {
  if (frames_.size() == 1) invalid(i, "unmatched ')'");
  Frame f = std::move(frames_.back());
  frames_.pop_back();
  const uint32_t body = alternation(std::move(f.alternatives), std::move(f.seq));
  fold_ = f.saved_fold;
  if (f.kind == GroupKind::kPlain) {
    emit(body);
  } else {
    Node n;
    n.kind = Node::Kind::kLook;
    n.children = {body};
    n.behind = f.kind == GroupKind::kLookbehind || f.kind == GroupKind::kNegLookbehind;
    n.negate = f.kind == GroupKind::kNegLookahead || f.kind == GroupKind::kNegLookbehind;
    n.quantifiable = false;
    emit(add_node(std::move(n)));
  }
  ++i;
}

void Parser::parse_escape(size_t& i) {
  char32_t kind;
  std::u32string_view body;
  size_t len;
  if (t_.braced_escape(i, kind, body, len)) {
    if (kind == 'x' || kind == 'u') {
      auto cp = t_.braced_code_point(body);
      if (!cp) invalid(i, "invalid \\" + utf8(std::u32string(1, kind)) + "{...} escape");
      // The rewrite folds \x{..} (1 to 8 hex digits) but never \u{..}.
      emit_literal(*cp, kind == 'x' && body.size() <= 8);
    } else if (body == U"Word") {
      emit_set(kind == 'p' ? word_set() : word_set().complement());
    } else {
      emit_set(t_.property_set(body, kind == 'P', i));
    }
    i += len;
    return;
  }
  char32_t value;
  if (t_.fixed_width_escape(i, value, len)) {
    emit_literal(value, at(i + 1) != 'c');
    i += len;
    return;
  }
  if (i + 1 >= t_.size()) invalid(i, "'\\' at the end of the pattern");
  const char32_t next = t_.at(i + 1);
  const size_t esc = i;
  i += 2;
  switch (next) {
    case 'G': return;  // the rewrite drops \G (a match always starts where the last ended)
    case 'n': emit_literal('\n', false); return;
    case 'r': emit_literal('\r', false); return;
    case 't': emit_literal('\t', false); return;
    case 'f': emit_literal('\f', false); return;
    case 'v': emit_literal('\v', false); return;
    case 'a': emit_literal(0x07, false); return;
    case 'e': emit_literal(0x1B, false); return;
    case 'A': emit_assert(AssertKind::kTextStart, false); return;
    case 'z': emit_assert(AssertKind::kTextEnd, false); return;
    case 'Z': emit_assert(AssertKind::kTextEndNewline, false); return;
    case 'b': emit_assert(AssertKind::kWordBoundary, true); return;
    case 'B': emit_assert(AssertKind::kNotWordBoundary, true); return;
    case 'h': emit_set(hex_digits()); return;
    case 'H': emit_set(hex_digits().complement()); return;
    case 'w': emit_set(word_set()); return;
    case 'W': emit_set(word_set().complement()); return;
    case 'd': emit_set(categories(category_bit(GeneralCategory::kNd))); return;
    case 'D': emit_set(categories(category_bit(GeneralCategory::kNd)).complement()); return;
    case 's': emit_set(property(BinaryProperty::kWhiteSpace)); return;
    case 'S': emit_set(property(BinaryProperty::kWhiteSpace).complement()); return;
    default: break;
  }
  if (next == '0' && !is_ascii_digit(at(i))) {
    emit_literal(0, false);
  } else if ((next >= '1' && next <= '9') || next == 'k') {
    unsupported(esc, "back reference");
  } else if (is_ascii_letter(next) || is_ascii_digit(next)) {
    invalid(esc, "invalid escape '\\" + utf8(std::u32string(1, next)) + "'");
  } else {
    emit_literal(next, false);  // \. \- \' ...: the character itself
  }
}

}  // namespace

Ast parse(std::u32string_view pattern, std::string_view original) {
  // normalize_bloom_split_char_class: [^(\s|[xyz])] is read as [^()|\sxyz].
  std::u32string rewritten;
  constexpr std::u32string_view kOpen = U"[^(\\s|[";
  size_t i = 0;
  while (i < pattern.size()) {
    if (pattern.substr(i).starts_with(kOpen)) {
      const size_t body = i + kOpen.size();
      const size_t close = pattern.find(']', body);
      if (close != std::u32string_view::npos && close > body && pattern.substr(close).starts_with(U"])]")) {
        rewritten += U"[^()|\\s";
        rewritten += pattern.substr(body, close - body);
        rewritten += U"]";
        i = close + 3;
        continue;
      }
    }
    rewritten.push_back(pattern[i++]);
  }
  return Parser(rewritten, original).run();
}

}  // namespace tandem::text::regex_detail
