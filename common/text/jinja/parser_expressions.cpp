// Expressions and argument lists (statements are in parser.cpp).
#include <charconv>

#include "common/text/jinja/parser_impl.h"

namespace tandem::text::jinja::parsing {

ExprPtr Parser::parse_sequence(bool primary) {
  const uint32_t off = offset();
  ExprPtr first = primary ? parse_primary() : parse_expression();
  if (!is(TokenType::kComma)) return first;
  auto tuple = node(ExprKind::kTuple, off);
  tuple->items.push_back(std::move(first));
  while (is(TokenType::kComma)) {
    ++cur_;
    tuple->items.push_back(primary ? parse_primary() : parse_expression());
  }
  return seal(std::move(tuple));
}

ExprPtr Parser::parse_expression() {
  DepthGuard guard(*this);
  ExprPtr a = parse_or();
  if (!is_ident("if")) return a;
  const uint32_t off = offset();
  ++cur_;
  ExprPtr test = parse_or();
  if (is_ident("else")) {
    ++cur_;
    auto t = node(ExprKind::kTernary, off);
    t->items.push_back(std::move(test));
    t->items.push_back(std::move(a));
    t->items.push_back(parse_expression());
    return seal(std::move(t));
  }
  auto s = node(ExprKind::kSelect, off);
  s->items.push_back(std::move(a));
  s->items.push_back(std::move(test));
  return seal(std::move(s));
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_ident("or")) {
    const uint32_t off = t_[cur_++].offset;
    left = binary("or", off, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_ident("and")) {
    const uint32_t off = t_[cur_++].offset;
    left = binary("and", off, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (!is_ident("not")) return parse_comparison();
  DepthGuard guard(*this);
  auto e = node(ExprKind::kUnary, t_[cur_++].offset);
  e->name = "not";
  e->items.push_back(parse_not());
  return seal(std::move(e));
}

ExprPtr Parser::parse_comparison() {
  ExprPtr left = parse_additive();
  while (true) {
    const uint32_t off = offset();
    std::string op;
    if (is_ident("not") && is_ident("in", 1)) {
      op = "not in";
      cur_ += 2;
    } else if (is_ident("in")) {
      op = "in";
      ++cur_;
    } else if (is(TokenType::kComparison)) {
      op = t_[cur_++].value;
    } else {
      return left;
    }
    left = binary(std::move(op), off, std::move(left), parse_additive());
  }
}

ExprPtr Parser::parse_additive() {
  ExprPtr left = parse_multiplicative();
  while (is(TokenType::kAdditive)) {
    const Token& op = t_[cur_++];
    left = binary(op.value, op.offset, std::move(left), parse_multiplicative());
  }
  return left;
}

ExprPtr Parser::parse_multiplicative() {
  ExprPtr left = parse_power();
  while (is(TokenType::kMultiplicative)) {
    const Token& op = t_[cur_++];
    left = binary(op.value, op.offset, std::move(left), parse_power());
  }
  return left;
}

ExprPtr Parser::parse_power() {
  ExprPtr left = parse_test();
  while (is(TokenType::kPower)) {
    const Token& op = t_[cur_++];
    left = binary(op.value, op.offset, std::move(left), parse_test());
  }
  return left;
}

ExprPtr Parser::parse_test() {
  ExprPtr operand = parse_filter();
  while (is_ident("is")) {
    const uint32_t off = t_[cur_++].offset;
    const bool negate = is_ident("not");
    if (negate) ++cur_;
    if (!is(TokenType::kIdentifier)) fail(fmt::format("expected a test name after 'is', found {}", describe()));
    auto e = node(ExprKind::kTest, off);
    e->name = t_[cur_++].value;
    e->flag = negate;
    e->items.push_back(std::move(operand));
    if (is(TokenType::kOpenParen)) {
      fail(fmt::format("test '{}' with arguments is not supported", e->name), ErrorKind::kUnsupported);
    }
    operand = seal(std::move(e));
  }
  return operand;
}

ExprPtr Parser::parse_filter() {
  ExprPtr operand = parse_unary_sign();
  while (is(TokenType::kPipe)) {
    ++cur_;
    if (!is(TokenType::kIdentifier)) fail(fmt::format("expected a filter name after '|', found {}", describe()));
    auto e = node(ExprKind::kFilter, offset());
    e->name = t_[cur_++].value;
    e->items.push_back(std::move(operand));
    if (is(TokenType::kOpenParen)) {
      e->flag = true;
      e->args = parse_args(ArgsMode::kCall);
      if (is(TokenType::kDot) || is(TokenType::kOpenBracket) || is(TokenType::kOpenParen)) {
        fail(fmt::format("member access or call on the filter '{}' itself is not supported", e->name),
             ErrorKind::kUnsupported);
      }
    }
    operand = seal(std::move(e));
  }
  return operand;
}

ExprPtr Parser::parse_unary_sign() {
  if ((is(TokenType::kUnary) || is(TokenType::kAdditive)) && (t_[cur_].value == "-" || t_[cur_].value == "+")) {
    DepthGuard guard(*this);
    auto e = node(ExprKind::kUnary, offset());
    e->name = t_[cur_++].value;
    e->items.push_back(parse_unary_sign());
    return seal(std::move(e));
  }
  return parse_call_member();
}

ExprPtr Parser::parse_call_member() {
  ExprPtr member = parse_member(parse_primary());
  if (is(TokenType::kOpenParen)) return parse_call(std::move(member));
  return member;
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  DepthGuard guard(*this);
  auto call = node(ExprKind::kCall, callee->offset);
  call->items.push_back(std::move(callee));
  call->args = parse_args(ArgsMode::kCall);
  ExprPtr e = parse_member(seal(std::move(call)));
  if (is(TokenType::kOpenParen)) return parse_call(std::move(e));
  return e;
}

ExprPtr Parser::parse_member(ExprPtr object) {
  while (is(TokenType::kDot) || is(TokenType::kOpenBracket)) {
    const Token& op = t_[cur_++];
    auto member = node(ExprKind::kMember, object->offset);
    member->items.push_back(std::move(object));
    if (op.type == TokenType::kOpenBracket) {
      member->flag = true;
      member->items.push_back(parse_subscript(op.offset));
      expect(TokenType::kCloseBracket, "to close the subscript");
    } else {
      ExprPtr property = parse_primary();
      if (property->kind == ExprKind::kIdentifier) {
        property->kind = ExprKind::kLiteral;
        property->literal = Value(property->name);
      } else if (!(property->kind == ExprKind::kLiteral && property->literal.is_int())) {
        fail_at(property->offset, "expected a name or an integer after '.'");
      }
      member->items.push_back(std::move(property));
    }
    object = seal(std::move(member));
  }
  return object;
}

ExprPtr Parser::parse_subscript(uint32_t off) {
  std::vector<ExprPtr> parts;
  bool is_slice = false;
  while (!is(TokenType::kCloseBracket)) {
    if (cur_ >= t_.size()) fail("unexpected end of template inside '[...]'");
    if (is(TokenType::kColon)) {
      parts.push_back(nullptr);
      ++cur_;
      is_slice = true;
    } else {
      parts.push_back(parse_expression());
      if (is(TokenType::kColon)) {
        ++cur_;
        is_slice = true;
      }
    }
  }
  if (parts.empty()) fail_at(off, "expected a key or a slice inside '[]'");
  if (!is_slice) return std::move(parts[0]);
  if (parts.size() > 3) fail_at(off, "a slice has at most three parts (start:stop:step)");
  auto slice = node(ExprKind::kSlice, off);
  parts.resize(3);
  slice->items = std::move(parts);
  return seal(std::move(slice));
}

ExprPtr Parser::parse_primary() {
  if (cur_ >= t_.size()) fail("unexpected end of template in an expression");
  const Token& t = t_[cur_++];
  switch (t.type) {
    case TokenType::kNumber: {
      auto e = node(ExprKind::kLiteral, t.offset);
      const std::string& text = t.value;
      const char* begin = text.data() + (text[0] == '+' ? 1 : 0);
      if (text.find('.') != std::string::npos) {
        double d = 0;
        std::from_chars(begin, text.data() + text.size(), d);
        e->literal = Value(d);
      } else {
        int64_t i = 0;
        const auto res = std::from_chars(begin, text.data() + text.size(), i);
        if (res.ec != std::errc()) fail_at(t.offset, fmt::format("integer literal {} is too large", text));
        e->literal = Value(i);
      }
      return e;
    }
    case TokenType::kString: {
      auto e = node(ExprKind::kLiteral, t.offset);
      std::string value = t.value;
      while (is(TokenType::kString)) value += t_[cur_++].value;
      e->literal = Value(std::move(value));
      return e;
    }
    case TokenType::kIdentifier: {
      auto e = node(ExprKind::kIdentifier, t.offset);
      e->name = t.value;
      return e;
    }
    case TokenType::kOpenParen: {
      ExprPtr e = parse_sequence(/*primary=*/false);
      expect(TokenType::kCloseParen, "to close '('");
      return e;
    }
    case TokenType::kOpenBracket: {
      auto e = node(ExprKind::kList, t.offset);
      while (!is(TokenType::kCloseBracket)) {
        if (cur_ >= t_.size()) fail("unexpected end of template inside a list");
        e->items.push_back(parse_expression());
        if (is(TokenType::kComma)) ++cur_;
      }
      ++cur_;
      return seal(std::move(e));
    }
    case TokenType::kOpenBrace: {
      auto e = node(ExprKind::kDict, t.offset);
      while (!is(TokenType::kCloseBrace)) {
        if (cur_ >= t_.size()) fail("unexpected end of template inside a dict");
        e->items.push_back(parse_expression());
        expect(TokenType::kColon, "between a key and its value");
        e->items.push_back(parse_expression());
        if (is(TokenType::kComma)) ++cur_;
      }
      ++cur_;
      return seal(std::move(e));
    }
    default:
      --cur_;
      fail(fmt::format("unexpected {} in an expression", describe()));
  }
}

std::vector<Arg> Parser::parse_args(ArgsMode mode) {
  expect(TokenType::kOpenParen, "to start the arguments");
  std::vector<Arg> args;
  bool saw_keyword = false;
  bool saw_spread = false;
  const bool params = mode == ArgsMode::kParameters;
  while (!is(TokenType::kCloseParen)) {
    if (cur_ >= t_.size()) fail("unexpected end of template inside an argument list");
    const uint32_t off = offset();
    const bool kw_spread = is(TokenType::kPower);
    const bool spread = is(TokenType::kMultiplicative) && t_[cur_].value == "*";
    if (params && (kw_spread || spread)) fail("argument unpacking is not allowed in a parameter list");
    if (kw_spread) {
      ++cur_;
      args.push_back(Arg{ArgKind::kKeywordSpread, {}, parse_expression()});
      if (is(TokenType::kComma)) ++cur_;
      if (!is(TokenType::kCloseParen)) fail("'**' must be applied to the last argument");
      break;
    }
    if (spread) {
      if (saw_spread) fail("only one '*' argument unpacking is allowed");
      saw_spread = true;
      ++cur_;
      args.push_back(Arg{ArgKind::kSpread, {}, parse_expression()});
    } else {
      ExprPtr e = parse_expression();
      Arg arg{ArgKind::kPositional, {}, nullptr};
      if (is(TokenType::kEquals)) {
        ++cur_;
        if (e->kind != ExprKind::kIdentifier) fail_at(off, "expected a name before '='");
        arg = Arg{ArgKind::kKeyword, e->name, parse_expression()};
      } else if (params) {
        if (e->kind != ExprKind::kIdentifier) fail_at(off, "expected a parameter name");
        arg.name = e->name;
      } else {
        arg.value = std::move(e);
      }
      if (params) {
        for (const Arg& a : args) {
          if (a.name == arg.name) fail_at(off, fmt::format("duplicate parameter '{}'", arg.name));
        }
      }
      if (arg.kind == ArgKind::kKeyword) {
        saw_keyword = true;
      } else if (saw_keyword) {
        fail_at(off, params ? "a parameter without a default follows one with a default"
                            : "a positional argument follows a keyword argument");
      } else if (saw_spread) {
        fail_at(off, "a positional argument follows '*' unpacking");
      }
      args.push_back(std::move(arg));
    }
    if (is(TokenType::kComma)) ++cur_;
  }
  ++cur_;  // )
  return args;
}

}  // namespace tandem::text::jinja::parsing
