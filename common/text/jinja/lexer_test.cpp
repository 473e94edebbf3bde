// Tokens, preprocessing and source positions.
#include "common/text/jinja/lexer.h"

#include <gtest/gtest.h>

namespace tandem::text::jinja {
namespace {

std::vector<Token> lex(const std::string& source) { return tokenize(SourceInfo("t", source)); }

std::string error_of(const std::string& source) {
  try {
    lex(source);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Lexer, TokenTypes) {
  const auto tokens = lex("a{{ x.y[0] | f(1, k='v') ~ -2 + 1.5 }}{% if not z %}");
  std::vector<TokenType> types;
  for (const Token& t : tokens) types.push_back(t.type);
  using T = TokenType;
  EXPECT_EQ(types, (std::vector<T>{T::kText, T::kOpenExpression, T::kIdentifier, T::kDot, T::kIdentifier,
                                   T::kOpenBracket, T::kNumber, T::kCloseBracket, T::kPipe, T::kIdentifier,
                                   T::kOpenParen, T::kNumber, T::kComma, T::kIdentifier, T::kEquals, T::kString,
                                   T::kCloseParen, T::kAdditive, T::kNumber, T::kAdditive, T::kNumber,
                                   T::kCloseExpression, T::kOpenStatement, T::kIdentifier, T::kIdentifier,
                                   T::kIdentifier, T::kCloseStatement}));
  EXPECT_EQ(tokens[18].value, "-2");  // a sign after an operator is part of the number
  EXPECT_EQ(tokens[20].value, "1.5");
}

TEST(Lexer, SignsAfterOperandsAreOperators) {
  const auto tokens = lex("{{ x -1 }}{{ (-y) }}");
  EXPECT_EQ(tokens[2].type, TokenType::kAdditive);
  EXPECT_EQ(tokens[3].value, "1");
  EXPECT_EQ(tokens[7].type, TokenType::kUnary);
}

TEST(Lexer, NestedBracesDoNotCloseTheExpression) {
  const auto tokens = lex("{{ {'a': {'b': 1}} }}");
  EXPECT_EQ(tokens.back().type, TokenType::kCloseExpression);
  EXPECT_EQ(tokens[tokens.size() - 2].type, TokenType::kCloseBrace);
}

TEST(Lexer, OffsetsPointIntoTheOriginalSource) {
  // lstrip_blocks and trim_blocks remove text; positions still name the
  // line and column as written.
  const std::string src = "line one\n    {% if x %}\n  {{ y }}\n{% endif %}";
  SourceInfo info("t", src);
  const auto tokens = tokenize(info);
  for (const Token& t : tokens) {
    if (t.type == TokenType::kIdentifier && t.value == "y") {
      EXPECT_EQ(info.line_col(t.offset), (std::pair<uint32_t, uint32_t>{3, 6}));
    }
    if (t.type == TokenType::kIdentifier && t.value == "if") {
      EXPECT_EQ(info.line_col(t.offset), (std::pair<uint32_t, uint32_t>{2, 8}));
    }
  }
  EXPECT_EQ(tokens[0].value, "line one\n");  // the spaces before {% went, the newline after %} too
}

TEST(Lexer, ColumnsCountCodePoints) {
  SourceInfo info("t", "héllo {{ x }}");
  const auto tokens = tokenize(info);
  EXPECT_EQ(info.line_col(tokens[2].offset), (std::pair<uint32_t, uint32_t>{1, 10}));
}

TEST(Lexer, GenerationMarkersAreRemoved) {
  const auto tokens = lex("a {% generation %}b{%- endgeneration -%} c");
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].value, "a bc");
}

TEST(Lexer, StringEscapes) {
  const auto tokens = lex(R"({{ 'a\n\t\\\'\"\x41\u00e9\ud83d\ude00' }})");
  EXPECT_EQ(tokens[1].value, "a\n\t\\'\"Aé😀");
}

TEST(Lexer, ErrorsNamePosition) {
  EXPECT_EQ(error_of("ab\n{{ 'x }}"), "chat template 't': line 2 col 4: unterminated string literal");
  EXPECT_EQ(error_of("{{ x @ y }}"), "chat template 't': line 1 col 6: unexpected character '@'");
  EXPECT_EQ(error_of("{{ 'é' ∆ }}"), "chat template 't': line 1 col 8: unexpected character '∆'");
  EXPECT_EQ(error_of("x {# open"), "chat template 't': line 1 col 3: comment '{#' is not closed by '#}'");
  EXPECT_EQ(error_of("{{ '\\u12' }}").rfind("chat template 't': line 1 col 5: invalid escape sequence '\\u12", 0), 0u);
  EXPECT_EQ(error_of("{{ x "), "chat template 't': line 1 col 6: unexpected end of template inside a tag");
}

}  // namespace
}  // namespace tandem::text::jinja
