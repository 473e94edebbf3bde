#include "common/text/jinja/parser.h"

#include <fmt/format.h>

#include "common/text/jinja/parser_impl.h"

namespace tandem::text::jinja {
namespace parsing {
namespace {

// Statements that Jinja has and this engine (like @huggingface/jinja) does not.
constexpr std::string_view kUnsupportedStatements[] = {
    "include", "import", "from", "extends", "block", "raw", "with", "do", "autoescape", "trans", "print"};

}  // namespace

Stmt Parser::parse_any() {
  DepthGuard guard(*this);
  const Token& t = t_[cur_];
  switch (t.type) {
    case TokenType::kComment:
      ++cur_;
      return Stmt{StmtKind::kComment, t.offset, {}, {}, {}, {}, {}, {}, {}};
    case TokenType::kText:
      ++cur_;
      return Stmt{StmtKind::kText, t.offset, t.value, {}, {}, {}, {}, {}, {}};
    case TokenType::kOpenStatement: return parse_statement();
    case TokenType::kOpenExpression: {
      ++cur_;
      Stmt s{StmtKind::kOutput, t.offset, {}, parse_expression(), {}, {}, {}, {}, {}};
      expect(TokenType::kCloseExpression, "to close the expression");
      return s;
    }
    default: fail(fmt::format("unexpected {}", describe()));
  }
}

Stmt Parser::parse_statement() {
  const uint32_t off = offset();
  ++cur_;  // {%
  if (!is(TokenType::kIdentifier)) fail(fmt::format("expected a statement name, found {}", describe()));
  const std::string name = t_[cur_].value;
  ++cur_;
  if (name == "set") return parse_set(off);
  if (name == "if") {
    Stmt s = parse_if(off);
    expect_end("endif");
    return s;
  }
  if (name == "for") {
    Stmt s = parse_for(off);
    expect_end("endfor");
    return s;
  }
  if (name == "macro") {
    Stmt s = parse_macro(off);
    expect_end("endmacro");
    return s;
  }
  if (name == "call") return parse_call_block(off);
  if (name == "filter") return parse_filter_block(off);
  if (name == "break" || name == "continue") {
    expect(TokenType::kCloseStatement, fmt::format("after '{}'", name));
    return Stmt{name == "break" ? StmtKind::kBreak : StmtKind::kContinue, off, {}, {}, {}, {}, {}, {}, {}};
  }
  for (std::string_view unsupported : kUnsupportedStatements) {
    if (name == unsupported) fail_at(off, fmt::format("unsupported statement '{}'", name), ErrorKind::kUnsupported);
  }
  if (name.starts_with("end") || name == "elif" || name == "else") {
    fail_at(off, fmt::format("'{{% {} %}}' without an open block it could close", name));
  }
  fail_at(off, fmt::format("unknown statement '{}'", name), ErrorKind::kUnsupported);
}

Stmt Parser::parse_if(uint32_t off) {
  Stmt s{StmtKind::kIf, off, {}, parse_expression(), {}, {}, {}, {}, {}};
  expect(TokenType::kCloseStatement, "after the 'if' condition");
  s.body = parse_until({"elif", "else", "endif"}, "if", off);
  if (is_statement({"elif"})) {
    const uint32_t elif_off = offset();
    cur_ += 2;
    s.alternate.push_back(parse_if(elif_off));
  } else if (is_statement({"else"})) {
    cur_ += 2;
    expect(TokenType::kCloseStatement, "after 'else'");
    s.alternate = parse_until({"endif"}, "if", off);
  }
  return s;
}

Stmt Parser::parse_for(uint32_t off) {
  Stmt s{StmtKind::kFor, off, {}, {}, parse_sequence(/*primary=*/true), {}, {}, {}, {}};
  if (s.target->kind != ExprKind::kIdentifier && s.target->kind != ExprKind::kTuple) {
    fail_at(s.target->offset, "expected a name or a tuple of names as the loop variable");
  }
  expect_ident("in", "after the loop variable");
  s.expr = parse_expression();
  if (s.expr->kind == ExprKind::kSelect) {
    // for x in items if cond: the condition filters the items.
    s.condition = std::move(s.expr->items[1]);
    s.expr = std::move(s.expr->items[0]);
  }
  expect(TokenType::kCloseStatement, "after the 'for' header");
  s.body = parse_until({"endfor", "else"}, "for", off);
  if (is_statement({"else"})) {
    cur_ += 2;
    expect(TokenType::kCloseStatement, "after 'else'");
    s.alternate = parse_until({"endfor"}, "for", off);
  }
  return s;
}

Stmt Parser::parse_set(uint32_t off) {
  Stmt s{StmtKind::kSet, off, {}, {}, parse_sequence(/*primary=*/false), {}, {}, {}, {}};
  if (is(TokenType::kEquals)) {
    ++cur_;
    s.expr = parse_sequence(/*primary=*/false);
  } else {
    expect(TokenType::kCloseStatement, "after the 'set' target");
    s.body = parse_until({"endset"}, "set", off);
    expect(TokenType::kOpenStatement, "before 'endset'");
    expect_ident("endset", "to close the block");
  }
  expect(TokenType::kCloseStatement, "to close 'set'");
  return s;
}

Stmt Parser::parse_macro(uint32_t off) {
  if (!is(TokenType::kIdentifier)) fail(fmt::format("expected the macro name, found {}", describe()));
  Stmt s{StmtKind::kMacro, off, t_[cur_++].value, {}, {}, {}, {}, {}, {}};
  s.params = parse_args(ArgsMode::kParameters);
  expect(TokenType::kCloseStatement, "after the macro signature");
  s.body = parse_until({"endmacro"}, "macro", off);
  return s;
}

Stmt Parser::parse_call_block(uint32_t off) {
  Stmt s{StmtKind::kCallBlock, off, {}, {}, {}, {}, {}, {}, {}};
  if (is(TokenType::kOpenParen)) s.params = parse_args(ArgsMode::kParameters);
  if (!is(TokenType::kIdentifier)) fail(fmt::format("expected a macro name after 'call', found {}", describe()));
  auto callee = node(ExprKind::kIdentifier, offset());
  callee->name = t_[cur_++].value;
  auto call = node(ExprKind::kCall, callee->offset);
  call->items.push_back(std::move(callee));
  call->args = parse_args(ArgsMode::kCall);
  s.expr = seal(std::move(call));
  expect(TokenType::kCloseStatement, "after the 'call' header");
  s.body = parse_until({"endcall"}, "call", off);
  expect_end("endcall");
  return s;
}

Stmt Parser::parse_filter_block(uint32_t off) {
  if (!is(TokenType::kIdentifier)) fail(fmt::format("expected a filter name, found {}", describe()));
  auto filter = node(ExprKind::kFilter, offset());
  filter->name = t_[cur_++].value;
  filter->items.push_back(nullptr);  // the operand: the rendered body
  if (is(TokenType::kOpenParen)) {
    filter->flag = true;
    filter->args = parse_args(ArgsMode::kCall);
  }
  Stmt s{StmtKind::kFilterBlock, off, {}, seal(std::move(filter)), {}, {}, {}, {}, {}};
  expect(TokenType::kCloseStatement, "after the filter");
  s.body = parse_until({"endfilter"}, "filter", off);
  expect_end("endfilter");
  return s;
}

}  // namespace parsing

std::vector<Stmt> parse(const std::vector<Token>& tokens, const SourceInfo& source) {
  return parsing::Parser(tokens, source).run();
}

}  // namespace tandem::text::jinja
