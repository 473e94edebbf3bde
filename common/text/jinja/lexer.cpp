#include "common/text/jinja/lexer.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {

SourceInfo::SourceInfo(std::string label, std::string source)
    : label_(std::move(label)), source_(std::move(source)) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source_.size(); ++i) {
    if (source_[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
  }
}

std::pair<uint32_t, uint32_t> SourceInfo::line_col(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(source_.size()));
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const auto line = static_cast<uint32_t>(it - line_starts_.begin());
  const uint32_t start = line_starts_[line - 1];
  uint32_t col = 1;
  for (uint32_t i = start; i < offset; ++i) {
    if ((static_cast<unsigned char>(source_[i]) & 0xC0) != 0x80) ++col;
  }
  return {line, col};
}

std::string SourceInfo::message_at(uint32_t offset, std::string_view message) const {
  const auto [line, col] = line_col(offset);
  return fmt::format("chat template '{}': line {} col {}: {}", label_, line, col, message);
}

void SourceInfo::fail_at(uint32_t offset, ErrorKind kind, std::string_view message) const {
  throw Error(kind, message_at(offset, message));
}

const char* to_string(TokenType type) {
  switch (type) {
    case TokenType::kText: return "text";
    case TokenType::kNumber: return "number";
    case TokenType::kString: return "string";
    case TokenType::kIdentifier: return "identifier";
    case TokenType::kEquals: return "'='";
    case TokenType::kOpenParen: return "'('";
    case TokenType::kCloseParen: return "')'";
    case TokenType::kOpenStatement: return "'{%'";
    case TokenType::kCloseStatement: return "'%}'";
    case TokenType::kOpenExpression: return "'{{'";
    case TokenType::kCloseExpression: return "'}}'";
    case TokenType::kOpenBracket: return "'['";
    case TokenType::kCloseBracket: return "']'";
    case TokenType::kOpenBrace: return "'{'";
    case TokenType::kCloseBrace: return "'}'";
    case TokenType::kComma: return "','";
    case TokenType::kDot: return "'.'";
    case TokenType::kColon: return "':'";
    case TokenType::kPipe: return "'|'";
    case TokenType::kAdditive: return "operator";
    case TokenType::kMultiplicative: return "operator";
    case TokenType::kPower: return "'**'";
    case TokenType::kComparison: return "comparison";
    case TokenType::kUnary: return "sign";
    case TokenType::kComment: return "comment";
  }
  return "token";
}

namespace {

// Text with, for every byte, the offset in the original source it came from
// (one extra entry for the end).
struct Mapped {
  std::string text;
  std::vector<uint32_t> offsets;

  void push(char c, uint32_t offset) {
    text.push_back(c);
    offsets.push_back(offset);
  }
};

Mapped identity(const std::string& s) {
  Mapped m;
  m.text = s;
  m.offsets.resize(s.size() + 1);
  for (size_t i = 0; i <= s.size(); ++i) m.offsets[i] = static_cast<uint32_t>(i);
  return m;
}

Mapped finish(Mapped m, uint32_t end) {
  m.offsets.push_back(end);
  return m;
}

// A JavaScript line terminator ends at s[i] (\n, \r, U+2028, U+2029).
bool ends_line_terminator(const std::string& s, size_t i) {
  if (s[i] == '\n' || s[i] == '\r') return true;
  return i >= 2 && static_cast<unsigned char>(s[i - 2]) == 0xE2 && static_cast<unsigned char>(s[i - 1]) == 0x80 &&
         (static_cast<unsigned char>(s[i]) == 0xA8 || static_cast<unsigned char>(s[i]) == 0xA9);
}

// template.replace(/^[ \t]*({[#%-])/gm, "$1")
Mapped lstrip_blocks(const Mapped& in) {
  const std::string& s = in.text;
  Mapped out;
  bool line_start = true;
  for (size_t i = 0; i < s.size();) {
    if (line_start) {
      line_start = false;
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) i = j;
      if (i >= s.size()) break;
    }
    out.push(s[i], in.offsets[i]);
    if (ends_line_terminator(s, i)) line_start = true;
    ++i;
  }
  return finish(std::move(out), in.offsets.back());
}

// template.replace(/([#%-]})\n/g, "$1")
Mapped trim_blocks(const Mapped& in) {
  const std::string& s = in.text;
  Mapped out;
  for (size_t i = 0; i < s.size();) {
    if (i + 2 < s.size() && (s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' && s[i + 2] == '\n') {
      out.push(s[i], in.offsets[i]);
      out.push(s[i + 1], in.offsets[i + 1]);
      i += 3;
      continue;
    }
    out.push(s[i], in.offsets[i]);
    ++i;
  }
  return finish(std::move(out), in.offsets.back());
}

// Byte length of the JavaScript whitespace code point at s[i], 0 if none.
size_t space_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return is_js_space(b) ? 1 : 0;
  size_t len = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
  if (i + len > s.size()) return 0;
  const std::u32string cp = decode_utf8(s.substr(i, len));
  return cp.size() == 1 && is_js_space(cp[0]) ? len : 0;
}

// Length of a generation marker at s[i] ({%-? \s* (end)?generation \s* -?%}),
// with whether it has the leading and trailing '-'; 0 if there is none.
size_t generation_marker(std::string_view s, size_t i, bool& lstrip, bool& rstrip) {
  if (s.substr(i, 2) != "{%") return 0;
  size_t j = i + 2;
  lstrip = j < s.size() && s[j] == '-';
  if (lstrip) ++j;
  while (size_t n = space_at(s, j)) j += n;
  if (s.substr(j, 3) == "end") j += 3;
  if (s.substr(j, 10) != "generation") return 0;
  j += 10;
  while (size_t n = space_at(s, j)) j += n;
  rstrip = j < s.size() && s[j] == '-';
  if (rstrip && s.substr(j + 1, 2) == "%}") return j + 3 - i;
  rstrip = false;
  if (s.substr(j, 2) == "%}") return j + 2 - i;
  return 0;
}

// template.replace(/(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs, ...):
// the marker goes, the whitespace around it stays unless the marker strips it.
Mapped remove_generation_markers(const Mapped& in) {
  const std::string& s = in.text;
  Mapped out;
  size_t copied = 0;  // s[0, copied) is in out
  size_t i = 0;
  while (i < s.size()) {
    // A match starts at a whitespace run (or directly at the marker).
    size_t j = i;
    while (size_t n = space_at(s, j)) j += n;
    bool lstrip = false;
    bool rstrip = false;
    const size_t len = generation_marker(s, j, lstrip, rstrip);
    if (len == 0) {
      i = j > i ? j : i + 1;
      continue;
    }
    const size_t before = i;
    size_t after_end = j + len;
    while (size_t n = space_at(s, after_end)) after_end += n;
    for (size_t k = copied; k < before; ++k) out.push(s[k], in.offsets[k]);
    if (!lstrip) {
      for (size_t k = before; k < j; ++k) out.push(s[k], in.offsets[k]);
    }
    if (!rstrip) {
      for (size_t k = j + len; k < after_end; ++k) out.push(s[k], in.offsets[k]);
    }
    copied = after_end;
    i = after_end;
  }
  for (size_t k = copied; k < s.size(); ++k) out.push(s[k], in.offsets[k]);
  return finish(std::move(out), in.offsets.back());
}

Mapped preprocess(const std::string& source) {
  Mapped m = identity(source);
  if (!m.text.empty() && m.text.back() == '\n') {
    m.text.pop_back();
    m.offsets.pop_back();
  }
  m = lstrip_blocks(m);
  m = trim_blocks(m);
  return remove_generation_markers(m);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_';
}

struct Operator {
  std::string_view text;
  TokenType type;
};

// Longest first where one is a prefix of another, as the reference orders them.
constexpr std::array<Operator, 29> kOperators = {{
    {"{%", TokenType::kOpenStatement},  {"%}", TokenType::kCloseStatement},
    {"{{", TokenType::kOpenExpression}, {"}}", TokenType::kCloseExpression},
    {"(", TokenType::kOpenParen},       {")", TokenType::kCloseParen},
    {"{", TokenType::kOpenBrace},       {"}", TokenType::kCloseBrace},
    {"[", TokenType::kOpenBracket},     {"]", TokenType::kCloseBracket},
    {",", TokenType::kComma},           {".", TokenType::kDot},
    {":", TokenType::kColon},           {"|", TokenType::kPipe},
    {"<=", TokenType::kComparison},     {">=", TokenType::kComparison},
    {"==", TokenType::kComparison},     {"!=", TokenType::kComparison},
    {"<", TokenType::kComparison},      {">", TokenType::kComparison},
    {"+", TokenType::kAdditive},        {"-", TokenType::kAdditive},
    {"~", TokenType::kAdditive},        {"**", TokenType::kPower},
    {"*", TokenType::kMultiplicative},  {"//", TokenType::kMultiplicative},
    {"/", TokenType::kMultiplicative},  {"%", TokenType::kMultiplicative},
    {"=", TokenType::kEquals},
}};

class Lexer {
 public:
  Lexer(const SourceInfo& info, Mapped src) : info_(info), m_(std::move(src)), s_(m_.text) {}

  std::vector<Token> run();

 private:
  [[noreturn]] void fail(size_t pos, std::string_view message) const {
    info_.fail_at(m_.offsets[std::min(pos, s_.size())], ErrorKind::kInvalidInput, message);
  }
  void push(TokenType type, std::string value, size_t pos) {
    tokens_.push_back(Token{type, std::move(value), m_.offsets[pos]});
  }
  bool at(size_t pos, std::string_view what) const { return s_.compare(pos, what.size(), what) == 0; }
  void skip_space() {
    while (size_t n = space_at(s_, pos_)) pos_ += n;
  }
  // {%- {{- {#-: the text before loses its trailing whitespace.
  void strip_trailing_text() {
    if (tokens_.empty() || tokens_.back().type != TokenType::kText) return;
    tokens_.back().value = js_trim(tokens_.back().value, false, true);
    if (tokens_.back().value.empty()) tokens_.pop_back();
  }
  void lex_comment();
  void lex_string(char quote);
  void lex_number(size_t start, std::string prefix);
  void append_escape(std::string& out);

  const SourceInfo& info_;
  Mapped m_;
  const std::string& s_;
  size_t pos_ = 0;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
};

void Lexer::lex_comment() {
  const size_t start = pos_;
  pos_ += 2;
  const bool strip_before = pos_ < s_.size() && s_[pos_] == '-';
  if (strip_before) ++pos_;
  const size_t end = s_.find("#}", pos_);
  if (end == std::string::npos) fail(start, "comment '{#' is not closed by '#}'");
  std::string comment = s_.substr(pos_, end - pos_);
  const bool strip_after = !comment.empty() && comment.back() == '-';
  if (strip_after) comment.pop_back();
  if (strip_before) strip_trailing_text();
  push(TokenType::kComment, std::move(comment), start);
  pos_ = end + 2;
  if (strip_after) skip_space();
}

void Lexer::append_escape(std::string& out) {
  const size_t start = pos_;
  ++pos_;  // the backslash
  if (pos_ >= s_.size()) fail(start, "unterminated string literal");
  const char e = s_[pos_++];
  if (e == 'x' || e == 'u') {
    const size_t len = e == 'x' ? 2 : 4;
    const std::string hex = s_.substr(pos_, len);
    if (hex.size() != len || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
      fail(start, fmt::format("invalid escape sequence '\\{}{}'", e, hex));
    }
    pos_ += len;
    char32_t unit = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
    // A \uD8xx\uDCxx pair is one code point.
    if (unit >= 0xD800 && unit < 0xDC00 && at(pos_, "\\u")) {
      const std::string low = s_.substr(pos_ + 2, 4);
      if (low.size() == 4 && low.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
        const auto lo = static_cast<char32_t>(std::stoul(low, nullptr, 16));
        if (lo >= 0xDC00 && lo < 0xE000) {
          unit = 0x10000 + ((unit - 0xD800) << 10) + (lo - 0xDC00);
          pos_ += 6;
        }
      }
    }
    append_utf8(out, unit);
    return;
  }
  switch (e) {
    case 'n': out.push_back('\n'); return;
    case 't': out.push_back('\t'); return;
    case 'r': out.push_back('\r'); return;
    case 'b': out.push_back('\b'); return;
    case 'f': out.push_back('\f'); return;
    case 'v': out.push_back('\v'); return;
    case '\'': out.push_back('\''); return;
    case '"': out.push_back('"'); return;
    case '\\': out.push_back('\\'); return;
    default: fail(start, fmt::format("unsupported escape sequence '\\{}'", e));
  }
}

void Lexer::lex_string(char quote) {
  const size_t start = pos_;
  ++pos_;
  std::string value;
  while (true) {
    if (pos_ >= s_.size()) fail(start, "unterminated string literal");
    const char c = s_[pos_];
    if (c == quote) break;
    if (c == '\\') {
      append_escape(value);
      continue;
    }
    value.push_back(c);
    ++pos_;
  }
  ++pos_;
  push(TokenType::kString, std::move(value), start);
}

void Lexer::lex_number(size_t start, std::string prefix) {
  std::string num = std::move(prefix);
  const size_t digits = pos_;
  while (pos_ < s_.size() && is_digit(s_[pos_])) num.push_back(s_[pos_++]);
  const bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::kDot;
  if (pos_ > digits && !after_dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
    num.push_back(s_[pos_++]);
    while (pos_ < s_.size() && is_digit(s_[pos_])) num.push_back(s_[pos_++]);
  }
  push(TokenType::kNumber, std::move(num), start);
}

std::vector<Token> Lexer::run() {
  while (pos_ < s_.size()) {
    const bool outside = tokens_.empty() || tokens_.back().type == TokenType::kCloseStatement ||
                         tokens_.back().type == TokenType::kCloseExpression ||
                         tokens_.back().type == TokenType::kComment;
    if (outside) {
      const size_t start = pos_;
      while (pos_ < s_.size() && !(s_[pos_] == '{' && pos_ + 1 < s_.size() &&
                                   (s_[pos_ + 1] == '%' || s_[pos_ + 1] == '{' || s_[pos_ + 1] == '#'))) {
        ++pos_;
      }
      if (pos_ > start) {
        push(TokenType::kText, s_.substr(start, pos_ - start), start);
        continue;
      }
    }
    if (at(pos_, "{#")) {
      lex_comment();
      continue;
    }
    if (at(pos_, "{%-")) {
      strip_trailing_text();
      push(TokenType::kOpenStatement, "{%", pos_);
      pos_ += 3;
      continue;
    }
    if (at(pos_, "{{-")) {
      strip_trailing_text();
      push(TokenType::kOpenExpression, "{{", pos_);
      brace_depth_ = 0;
      pos_ += 3;
      continue;
    }
    skip_space();
    if (pos_ >= s_.size()) fail(pos_, "unexpected end of template inside a tag");
    if (at(pos_, "-%}")) {
      push(TokenType::kCloseStatement, "%}", pos_);
      pos_ += 3;
      skip_space();
      continue;
    }
    if (at(pos_, "-}}")) {
      push(TokenType::kCloseExpression, "}}", pos_);
      pos_ += 3;
      skip_space();
      continue;
    }
    const char c = s_[pos_];
    if (c == '-' || c == '+') {
      const TokenType last = tokens_.empty() ? TokenType::kText : tokens_.back().type;
      if (last == TokenType::kText) fail(pos_, fmt::format("unexpected character '{}'", c));
      const bool binary = last == TokenType::kIdentifier || last == TokenType::kNumber ||
                          last == TokenType::kString || last == TokenType::kCloseParen ||
                          last == TokenType::kCloseBracket;
      if (!binary) {
        const size_t start = pos_++;
        if (pos_ < s_.size() && is_digit(s_[pos_])) {
          lex_number(start, std::string(1, c));
        } else {
          push(TokenType::kUnary, std::string(1, c), start);
        }
        continue;
      }
    }
    bool matched = false;
    for (const Operator& op : kOperators) {
      if (op.type == TokenType::kCloseExpression && brace_depth_ > 0) continue;
      if (!at(pos_, op.text)) continue;
      push(op.type, std::string(op.text), pos_);
      if (op.type == TokenType::kOpenExpression) brace_depth_ = 0;
      if (op.type == TokenType::kOpenBrace) ++brace_depth_;
      if (op.type == TokenType::kCloseBrace) --brace_depth_;
      pos_ += op.text.size();
      matched = true;
      break;
    }
    if (matched) continue;
    if (c == '\'' || c == '"') {
      lex_string(c);
      continue;
    }
    if (is_digit(c)) {
      lex_number(pos_, "");
      continue;
    }
    if (is_word(c)) {
      const size_t start = pos_;
      while (pos_ < s_.size() && is_word(s_[pos_])) ++pos_;
      push(TokenType::kIdentifier, s_.substr(start, pos_ - start), start);
      continue;
    }
    std::string shown;
    append_utf8(shown, decode_utf8(std::string_view(s_).substr(pos_, 4)).front());
    fail(pos_, fmt::format("unexpected character '{}'", shown));
  }
  return std::move(tokens_);
}

}  // namespace

std::vector<Token> tokenize(const SourceInfo& source) {
  Lexer lexer(source, preprocess(source.source()));
  return lexer.run();
}

}  // namespace tandem::text::jinja
