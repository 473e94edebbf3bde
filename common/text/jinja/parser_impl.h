// The parser's class, shared by parser.cpp (statements) and
// parser_expressions.cpp (expressions and argument lists). Internal.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/text/jinja/ast.h"
#include "common/text/jinja/lexer.h"

namespace tandem::text::jinja::parsing {

constexpr int kMaxNesting = 200;  // statements and parenthesised expressions
constexpr uint32_t kMaxHeight = 256;  // any expression tree, left-deep chains (a + b + ...) included

enum class ArgsMode { kCall, kParameters };

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const SourceInfo& source) : t_(tokens), src_(source) {}

  std::vector<Stmt> run() {
    std::vector<Stmt> program;
    while (cur_ < t_.size()) program.push_back(parse_any());
    return program;
  }

 private:
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail(fmt::format("template nested deeper than {} levels", kMaxNesting));
    }
    ~DepthGuard() { --p.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  uint32_t offset() const {
    return cur_ < t_.size() ? t_[cur_].offset : static_cast<uint32_t>(src_.source().size());
  }
  std::string describe() const {
    if (cur_ >= t_.size()) return "end of template";
    const Token& t = t_[cur_];
    switch (t.type) {
      case TokenType::kText: return "text";
      case TokenType::kString: return fmt::format("string '{}'", t.value);
      case TokenType::kComment: return "comment";
      default: return fmt::format("'{}'", t.value);
    }
  }
  [[noreturn]] void fail(std::string_view message, ErrorKind kind = ErrorKind::kInvalidInput) const {
    src_.fail_at(offset(), kind, message);
  }
  [[noreturn]] void fail_at(uint32_t off, std::string_view message, ErrorKind kind = ErrorKind::kInvalidInput) const {
    src_.fail_at(off, kind, message);
  }

  bool is(TokenType type) const { return cur_ < t_.size() && t_[cur_].type == type; }
  bool is_ident(std::string_view name, size_t ahead = 0) const {
    return cur_ + ahead < t_.size() && t_[cur_ + ahead].type == TokenType::kIdentifier &&
           t_[cur_ + ahead].value == name;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!is(TokenType::kOpenStatement) || cur_ + 1 >= t_.size() || t_[cur_ + 1].type != TokenType::kIdentifier) {
      return false;
    }
    for (std::string_view n : names) {
      if (t_[cur_ + 1].value == n) return true;
    }
    return false;
  }
  const Token& expect(TokenType type, std::string_view context) {
    if (!is(type)) fail(fmt::format("expected {} {}, found {}", to_string(type), context, describe()));
    return t_[cur_++];
  }
  void expect_ident(std::string_view name, std::string_view context) {
    if (!is_ident(name)) fail(fmt::format("expected '{}' {}, found {}", name, context, describe()));
    ++cur_;
  }
  // Parses statements until one of `ends` ({% end... %}); the opening
  // statement's position is named if the template ends first.
  std::vector<Stmt> parse_until(std::initializer_list<std::string_view> ends, std::string_view opener,
                                uint32_t opener_offset) {
    std::vector<Stmt> body;
    while (!is_statement(ends)) {
      if (cur_ >= t_.size()) {
        const auto [line, col] = src_.line_col(opener_offset);
        fail(fmt::format("unexpected end of template: '{{% {} %}}' opened at line {} col {} is not closed by "
                         "'{{% end{} %}}'",
                         opener, line, col, opener));
      }
      if (is(TokenType::kOpenStatement) && cur_ + 1 < t_.size() && t_[cur_ + 1].type == TokenType::kIdentifier) {
        const std::string& name = t_[cur_ + 1].value;
        if (name.starts_with("end") || name == "elif" || name == "else") {
          const auto [line, col] = src_.line_col(opener_offset);
          fail(fmt::format("'{{% {} %}}' found where '{{% {} %}}' opened at line {} col {} expects '{{% end{} %}}'",
                           name, opener, line, col, opener));
        }
      }
      body.push_back(parse_any());
    }
    return body;
  }
  void expect_end(std::string_view end) {
    expect(TokenType::kOpenStatement, fmt::format("before '{}'", end));
    expect_ident(end, "to close the block");
    expect(TokenType::kCloseStatement, fmt::format("after '{}'", end));
  }

  static ExprPtr node(ExprKind kind, uint32_t off) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = off;
    return e;
  }
  // Records the height of a node whose children are attached; too tall a
  // tree is an error (evaluating and freeing it recurse on its height).
  ExprPtr seal(ExprPtr e) const {
    uint32_t h = 0;
    for (const ExprPtr& item : e->items) {
      if (item) h = std::max(h, item->height);
    }
    for (const Arg& a : e->args) {
      if (a.value) h = std::max(h, a.value->height);
    }
    e->height = h + 1;
    if (e->height > kMaxHeight) fail_at(e->offset, fmt::format("expression nested deeper than {} levels", kMaxHeight));
    return e;
  }
  ExprPtr binary(std::string op, uint32_t off, ExprPtr left, ExprPtr right) const {
    auto e = node(ExprKind::kBinary, off);
    e->name = std::move(op);
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return seal(std::move(e));
  }

  Stmt parse_any();
  Stmt parse_statement();
  Stmt parse_if(uint32_t off);
  Stmt parse_for(uint32_t off);
  Stmt parse_set(uint32_t off);
  Stmt parse_macro(uint32_t off);
  Stmt parse_call_block(uint32_t off);
  Stmt parse_filter_block(uint32_t off);

  ExprPtr parse_expression();
  ExprPtr parse_sequence(bool primary);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_comparison();
  ExprPtr parse_additive();
  ExprPtr parse_multiplicative();
  ExprPtr parse_power();
  ExprPtr parse_test();
  ExprPtr parse_filter();
  ExprPtr parse_unary_sign();
  ExprPtr parse_call_member();
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_member(ExprPtr object);
  ExprPtr parse_subscript(uint32_t off);
  ExprPtr parse_primary();
  std::vector<Arg> parse_args(ArgsMode mode);

  const std::vector<Token>& t_;
  const SourceInfo& src_;
  size_t cur_ = 0;
  int depth_ = 0;
};

}  // namespace tandem::text::jinja::parsing
