#include "common/text/regex.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "common/text/regex_internal.h"
#include "common/text/unicode.h"

namespace tandem::text {
namespace regex_detail {
namespace {

// Membership in O(1) for ASCII (and for the BMP when the set has many
// ranges, as \p{L} does), binary search above.
class CharSet {
 public:
  explicit CharSet(const CodePointSet& s) : ranges_(s.ranges()) {
    for (const CodePointRange& r : ranges_) {
      for (char32_t c = r.first; c <= r.last && c < 128; ++c) ascii_[c >> 6] |= uint64_t{1} << (c & 63);
    }
    if (ranges_.size() > 8) {
      bmp_.assign(0x10000 / 64, 0);
      for (const CodePointRange& r : ranges_) {
        for (char32_t c = r.first; c <= r.last && c < 0x10000; ++c) bmp_[c >> 6] |= uint64_t{1} << (c & 63);
      }
    }
  }
  bool contains(char32_t c) const {
    if (c < 128) return (ascii_[c >> 6] >> (c & 63)) & 1;
    if (c < 0x10000 && !bmp_.empty()) return (bmp_[c >> 6] >> (c & 63)) & 1;
    auto it = std::lower_bound(ranges_.begin(), ranges_.end(), c,
                               [](const CodePointRange& r, char32_t x) { return r.last < x; });
    return it != ranges_.end() && it->first <= c;
  }

 private:
  uint64_t ascii_[2] = {0, 0};
  std::vector<uint64_t> bmp_;
  std::vector<CodePointRange> ranges_;
};

enum class Op : uint8_t { kChar, kSet, kRepeat, kSplit, kJmp, kMark, kCheck, kAssert, kLook, kMatch };
constexpr uint32_t kNone = UINT32_MAX;

struct Inst {
  Op op = Op::kMatch;
  bool backward = false;  // consumes text leftwards (inside a lookbehind)
  bool greedy = true;     // kRepeat
  bool negate = false;    // kLook
  AssertKind assertion = AssertKind::kLineStart;
  // kChar: the code point; kSet, kRepeat: set index; kSplit: preferred target;
  // kJmp: target; kMark, kCheck: register; kLook: where to go on after the body.
  uint32_t a = 0;
  uint32_t b = 0;  // kSplit: the other target
  // kSplit: sets the next code point must be in for branch a / b to have any
  // chance (kNone: no such test). Saves a backtrack entry per alternative.
  uint32_t guard_a = kNone, guard_b = kNone;
  uint32_t min = 0, max = 0;  // kRepeat
};

}  // namespace

struct Program {
  std::string pattern;
  std::vector<Inst> insts;
  std::vector<CharSet> sets;
  uint32_t registers = 0;
  std::optional<CharSet> word;  // \w, for \b and \B
  uint32_t first = kNone;       // set every match starts with, when no match is empty
};

namespace {

constexpr size_t kMaxInstructions = 1 << 20;

// Compiles the tree into instructions. A lookbehind body is compiled
// backwards (JS matches it right to left); a lookaround body ends in kMatch.
class Compiler {
 public:
  Compiler(const Ast& ast, Program& prog) : ast_(ast), prog_(prog) {}

  void compile_all() {
    compile(ast_.root, false);
    emit({.op = Op::kMatch});
    const First& f = first(ast_.root, false);
    if (!f.nullable && !f.set.is_all()) prog_.first = add_set(f.set);
    if (ast_.uses_word_boundary) prog_.word.emplace(word_set());
  }

 private:
  struct First {
    CodePointSet set;  // code points a match of the node can start with
    bool nullable;     // it can match without consuming
  };

  uint32_t pc() const { return static_cast<uint32_t>(prog_.insts.size()); }
  uint32_t emit(Inst in) {
    if (prog_.insts.size() >= kMaxInstructions) {
      fail(ErrorKind::kUnsupported, "regex: pattern \"{}\" compiles to more than {} instructions "
           "(large counted repetitions of groups)", prog_.pattern.substr(0, 200), kMaxInstructions);
    }
    prog_.insts.push_back(in);
    return pc() - 1;
  }
  uint32_t add_set(const CodePointSet& s) {
    prog_.sets.emplace_back(s);
    return static_cast<uint32_t>(prog_.sets.size() - 1);
  }
  uint32_t node_set(uint32_t set_index) {
    auto [it, inserted] = set_ids_.try_emplace(set_index, 0);
    if (inserted) it->second = add_set(ast_.sets[set_index]);
    return it->second;
  }
  uint32_t guard(const First& f) {
    if (f.nullable || f.set.is_all()) return kNone;
    return add_set(f.set);
  }

  const First& first(uint32_t id, bool backward) {
    const auto key = std::pair{id, backward};
    if (auto it = first_.find(key); it != first_.end()) return it->second;
    const Node& n = ast_.nodes[id];
    First f{{}, true};
    switch (n.kind) {
      case Node::Kind::kSet: f = {ast_.sets[n.set], false}; break;
      case Node::Kind::kSeq:
        for (size_t k = 0; k < n.children.size() && f.nullable; ++k) {
          const First& c = first(n.children[backward ? n.children.size() - 1 - k : k], backward);
          f.set |= c.set;
          f.nullable = c.nullable;
        }
        break;
      case Node::Kind::kAlt:
        f.nullable = false;
        for (uint32_t child : n.children) {
          const First& c = first(child, backward);
          f.set |= c.set;
          f.nullable = f.nullable || c.nullable;
        }
        break;
      case Node::Kind::kRepeat: {
        const First& c = first(n.children[0], backward);
        f = {c.set, c.nullable || n.min == 0};
        break;
      }
      case Node::Kind::kAssert:
      case Node::Kind::kLook:
      case Node::Kind::kEmpty: break;  // zero-width
    }
    return first_.emplace(key, std::move(f)).first->second;
  }

  void compile(uint32_t id, bool backward) {
    const Node& n = ast_.nodes[id];
    switch (n.kind) {
      case Node::Kind::kSet: {
        const auto& ranges = ast_.sets[n.set].ranges();
        if (ranges.size() == 1 && ranges[0].first == ranges[0].last) {
          emit({.op = Op::kChar, .backward = backward, .a = ranges[0].first});
        } else {
          emit({.op = Op::kSet, .backward = backward, .a = node_set(n.set)});
        }
        break;
      }
      case Node::Kind::kSeq:
        for (size_t k = 0; k < n.children.size(); ++k) {
          compile(n.children[backward ? n.children.size() - 1 - k : k], backward);
        }
        break;
      case Node::Kind::kAlt: compile_alternation(n, backward); break;
      case Node::Kind::kRepeat: compile_repeat(n, backward); break;
      case Node::Kind::kAssert: emit({.op = Op::kAssert, .assertion = n.assertion}); break;
      case Node::Kind::kLook: {
        const uint32_t look = emit({.op = Op::kLook, .negate = n.negate});
        compile(n.children[0], n.behind);
        emit({.op = Op::kMatch});
        prog_.insts[look].a = pc();
        break;
      }
      case Node::Kind::kEmpty: break;
    }
  }

  void compile_alternation(const Node& n, bool backward) {
    // split(alt0, next) alt0 jmp(end) next: split(alt1, next') alt1 jmp(end) ... altN end
    std::vector<uint32_t> to_end;
    const size_t count = n.children.size();
    // Guards for "the rest": union of the first sets of alternatives k+1.. .
    std::vector<First> rest(count, First{{}, false});
    for (size_t k = count - 1; k-- > 0;) {
      const First& c = first(n.children[k + 1], backward);
      rest[k].set = k + 1 < count - 1 ? rest[k + 1].set : CodePointSet();
      rest[k].set |= c.set;
      rest[k].nullable = c.nullable || (k + 1 < count - 1 && rest[k + 1].nullable);
    }
    for (size_t k = 0; k < count; ++k) {
      if (k + 1 == count) {
        compile(n.children[k], backward);
        break;
      }
      const uint32_t split = emit({.op = Op::kSplit, .backward = backward});
      prog_.insts[split].a = pc();
      prog_.insts[split].guard_a = guard(first(n.children[k], backward));
      prog_.insts[split].guard_b = guard(rest[k]);
      compile(n.children[k], backward);
      to_end.push_back(emit({.op = Op::kJmp}));
      prog_.insts[split].b = pc();
    }
    for (uint32_t j : to_end) prog_.insts[j].a = pc();
  }

  void compile_repeat(const Node& n, bool backward) {
    const uint32_t child = n.children[0];
    const Node& c = ast_.nodes[child];
    if (c.kind == Node::Kind::kSet) {
      // One instruction with a counter: no backtrack entry per iteration.
      emit({.op = Op::kRepeat, .backward = backward, .greedy = n.greedy, .a = node_set(c.set),
            .min = n.min, .max = n.max});
      return;
    }
    for (uint32_t k = 0; k < n.min; ++k) compile(child, backward);
    if (n.max == n.min) return;
    // Iterations beyond the minimum fail when they match empty (ECMAScript's
    // RepeatMatcher); only a child that can match empty needs the check.
    const First& f = first(child, backward);
    const uint32_t body_guard = guard(f);
    auto optional_iteration = [&]() {
      const uint32_t split = emit({.op = Op::kSplit, .backward = backward});
      uint32_t reg = kNone;
      if (f.nullable) {
        reg = prog_.registers++;
        emit({.op = Op::kMark, .a = reg});
      }
      compile(child, backward);
      if (f.nullable) emit({.op = Op::kCheck, .a = reg});
      return split;
    };
    auto link = [&](uint32_t split, uint32_t body, uint32_t exit) {
      Inst& s = prog_.insts[split];
      s.a = n.greedy ? body : exit;
      s.b = n.greedy ? exit : body;
      (n.greedy ? s.guard_a : s.guard_b) = body_guard;
    };
    if (n.max == kInfinite) {
      const uint32_t split = optional_iteration();
      emit({.op = Op::kJmp, .a = split});
      link(split, split + 1, pc());
      return;
    }
    std::vector<uint32_t> splits;
    for (uint32_t k = n.min; k < n.max; ++k) splits.push_back(optional_iteration());
    for (uint32_t s : splits) link(s, s + 1, pc());
  }

  const Ast& ast_;
  Program& prog_;
  std::map<std::pair<uint32_t, bool>, First> first_;
  std::map<uint32_t, uint32_t> set_ids_;
};

// One backtracking run over a text. The stack holds choice points and
// register restores; lookarounds recurse with their own base on it.
class Matcher {
 public:
  Matcher(const Program& prog, std::u32string_view text)
      : prog_(prog), t_(text.data()), n_(text.size()), regs_(prog.registers, SIZE_MAX),
        // Real split patterns backtrack a few times per position; a pattern
        // with nested repetitions could take exponential time on hostile
        // text, so a bounded budget turns that hang into a clear error.
        steps_left_(uint64_t{4096} * (text.size() + 1) + (uint64_t{1} << 24)) {
    stack_.reserve(64);
  }

  bool run(uint32_t pc, size_t pos, size_t& end);

 private:
  enum class Kind : uint8_t { kBranch, kRestore, kGreedy, kLazy };
  struct Frame {
    Kind kind;
    uint32_t pc;   // kRestore: the register
    size_t pos;    // kRestore: the old value; kGreedy/kLazy: where the repetition starts / now ends
    size_t count;  // kGreedy/kLazy: iterations taken
  };

  bool in_set(uint32_t set, size_t pos, bool backward) const {
    if (backward) return pos > 0 && prog_.sets[set].contains(t_[pos - 1]);
    return pos < n_ && prog_.sets[set].contains(t_[pos]);
  }
  bool is_word(size_t i) const { return i < n_ && prog_.word->contains(t_[i]); }
  bool assertion(AssertKind kind, size_t pos) const {
    switch (kind) {
      case AssertKind::kLineStart: return pos == 0 || t_[pos - 1] == '\n';
      case AssertKind::kLineEnd: return pos == n_ || t_[pos] == '\n';
      case AssertKind::kTextStart: return pos == 0;
      case AssertKind::kTextEnd: return pos == n_;
      case AssertKind::kTextEndNewline: return pos == n_ || (pos + 1 == n_ && t_[pos] == '\n');
      case AssertKind::kWordBoundary: return (pos > 0 && is_word(pos - 1)) != is_word(pos);
      case AssertKind::kNotWordBoundary: return (pos > 0 && is_word(pos - 1)) == is_word(pos);
    }
    return false;
  }
  // Resumes the most recent choice point above `base`; false when none is left.
  bool backtrack(size_t base, uint32_t& pc, size_t& pos);

  const Program& prog_;
  const char32_t* t_;
  size_t n_;
  std::vector<size_t> regs_;
  std::vector<Frame> stack_;
  uint64_t steps_left_;
};

bool Matcher::run(uint32_t pc, size_t pos, size_t& end) {
  const size_t base = stack_.size();
  for (;;) {
    const Inst& in = prog_.insts[pc];
    switch (in.op) {
      case Op::kChar:
        if (in.backward ? (pos > 0 && t_[pos - 1] == in.a) : (pos < n_ && t_[pos] == in.a)) {
          pos = in.backward ? pos - 1 : pos + 1;
          ++pc;
          continue;
        }
        break;
      case Op::kSet:
        if (in_set(in.a, pos, in.backward)) {
          pos = in.backward ? pos - 1 : pos + 1;
          ++pc;
          continue;
        }
        break;
      case Op::kRepeat: {
        const CharSet& s = prog_.sets[in.a];
        const size_t room = std::min<size_t>(in.backward ? pos : n_ - pos, in.max);
        const size_t want = in.greedy ? room : std::min<size_t>(room, in.min);
        size_t k = 0;
        if (in.backward) {
          while (k < want && s.contains(t_[pos - 1 - k])) ++k;
        } else {
          while (k < want && s.contains(t_[pos + k])) ++k;
        }
        if (k < in.min) break;
        const size_t start = pos;
        pos = in.backward ? pos - k : pos + k;
        if (in.greedy && k > in.min) stack_.push_back({Kind::kGreedy, pc, start, k});
        if (!in.greedy && in.max > in.min) stack_.push_back({Kind::kLazy, pc, pos, k});
        ++pc;
        continue;
      }
      case Op::kSplit:
        if (in.guard_a != kNone && !in_set(in.guard_a, pos, in.backward)) {
          pc = in.b;
          continue;
        }
        if (in.guard_b == kNone || in_set(in.guard_b, pos, in.backward)) {
          stack_.push_back({Kind::kBranch, in.b, pos, 0});
        }
        pc = in.a;
        continue;
      case Op::kJmp: pc = in.a; continue;
      case Op::kMark:
        stack_.push_back({Kind::kRestore, in.a, regs_[in.a], 0});
        regs_[in.a] = pos;
        ++pc;
        continue;
      case Op::kCheck:
        if (regs_[in.a] != pos) {
          ++pc;
          continue;
        }
        break;
      case Op::kAssert:
        if (assertion(in.assertion, pos)) {
          ++pc;
          continue;
        }
        break;
      case Op::kLook: {
        // Lookarounds are atomic in JS: once the body matched, its choice
        // points are gone (run() drops them), and only found/not found counts.
        size_t ignored;
        if (run(pc + 1, pos, ignored) != in.negate) {
          pc = in.a;
          continue;
        }
        break;
      }
      case Op::kMatch:
        end = pos;
        stack_.resize(base);
        return true;
    }
    if (!backtrack(base, pc, pos)) return false;
  }
}

bool Matcher::backtrack(size_t base, uint32_t& pc, size_t& pos) {
  if (--steps_left_ == 0)
    fail(ErrorKind::kInvalidInput,
         "regex: pattern {} backtracks without bound on a text of {} characters (nested "
         "repetitions?); it cannot be used as a tokenizer split pattern",
         prog_.pattern.size() > 80 ? prog_.pattern.substr(0, 80) + "..." : prog_.pattern, n_);
  while (stack_.size() > base) {
    Frame& f = stack_.back();
    switch (f.kind) {
      case Kind::kBranch:
        pc = f.pc;
        pos = f.pos;
        stack_.pop_back();
        return true;
      case Kind::kRestore:
        regs_[f.pc] = f.pos;
        stack_.pop_back();
        continue;
      case Kind::kGreedy: {
        // Give back one iteration; the entry goes when the minimum is reached.
        const Inst& r = prog_.insts[f.pc];
        --f.count;
        pos = r.backward ? f.pos - f.count : f.pos + f.count;
        pc = f.pc + 1;
        if (f.count == r.min) stack_.pop_back();
        return true;
      }
      case Kind::kLazy: {
        // Take one more iteration if the next code point allows it.
        const Inst& r = prog_.insts[f.pc];
        if (f.count < r.max && in_set(r.a, f.pos, r.backward)) {
          ++f.count;
          f.pos = r.backward ? f.pos - 1 : f.pos + 1;
          pos = f.pos;
          pc = f.pc + 1;
          if (f.count == r.max) stack_.pop_back();
          return true;
        }
        stack_.pop_back();
        continue;
      }
    }
  }
  return false;
}

std::optional<Regex::Match> search(const Program& prog, Matcher& m, std::u32string_view text,
                                   size_t from) {
  const size_t n = text.size();
  for (size_t s = from; s <= n; ++s) {
    if (prog.first != kNone) {
      // No match is empty here, so one must start with a code point of `first`.
      const CharSet& f = prog.sets[prog.first];
      while (s < n && !f.contains(text[s])) ++s;
      if (s == n) return std::nullopt;
    }
    size_t end;
    if (m.run(0, s, end)) return Regex::Match{s, end};
  }
  return std::nullopt;
}

}  // namespace
}  // namespace regex_detail

Regex::Regex(std::shared_ptr<const regex_detail::Program> program) : program_(std::move(program)) {}

Regex Regex::compile(std::string_view pattern_utf8) {
  if (!is_valid_utf8(pattern_utf8)) {
    fail(ErrorKind::kInvalidInput, "regex: pattern is not valid UTF-8");
  }
  auto prog = std::make_shared<regex_detail::Program>();
  prog->pattern = std::string(pattern_utf8);
  const regex_detail::Ast ast = regex_detail::parse(decode_utf8(pattern_utf8), pattern_utf8);
  regex_detail::Compiler(ast, *prog).compile_all();
  return Regex(std::move(prog));
}

std::optional<Regex::Match> Regex::find(std::u32string_view text, size_t from) const {
  if (from > text.size()) return std::nullopt;
  regex_detail::Matcher m(*program_, text);
  return regex_detail::search(*program_, m, text, from);
}

void Regex::find_all(std::u32string_view text, std::vector<Match>& out) const {
  out.clear();
  regex_detail::Matcher m(*program_, text);
  size_t from = 0;
  while (from <= text.size()) {
    auto match = regex_detail::search(*program_, m, text, from);
    if (!match) break;
    out.push_back(*match);
    from = match->end == match->begin ? match->end + 1 : match->end;
  }
}

const std::string& Regex::pattern() const { return program_->pattern; }

}  // namespace tandem::text
