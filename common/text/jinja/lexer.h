// Template source -> tokens, as @huggingface/jinja tokenizes it:
//  - preprocessing: one trailing newline dropped; lstrip_blocks (spaces and
//    tabs before {% and {# at a line start removed) and trim_blocks (the
//    newline after %} and #} removed), both always on as that library sets
//    them; {% generation %} / {% endgeneration %} markers removed, keeping
//    the whitespace around them unless the marker has '-';
//  - whitespace control: {%- {{- {#- strip the text before, -%} -}} -#} the
//    whitespace after (JavaScript's whitespace set);
//  - string escapes \n \t \r \b \f \v \' \" \\ \xHH \uHHHH.
// Every token keeps the byte offset in the original source it came from, so
// errors name the line and column the author wrote.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tandem::text::jinja {

// The template's label and original text, for error positions.
class SourceInfo {
 public:
  SourceInfo(std::string label, std::string source);
  const std::string& label() const { return label_; }
  const std::string& source() const { return source_; }
  // 1-based line and column (in code points) of a byte offset.
  std::pair<uint32_t, uint32_t> line_col(uint32_t offset) const;
  // "chat template 'label': line L col C: " + message.
  std::string message_at(uint32_t offset, std::string_view message) const;
  [[noreturn]] void fail_at(uint32_t offset, ErrorKind kind, std::string_view message) const;

 private:
  std::string label_;
  std::string source_;
  std::vector<uint32_t> line_starts_;
};

enum class TokenType {
  kText,
  kNumber,
  kString,
  kIdentifier,
  kEquals,           // =
  kOpenParen,        // (
  kCloseParen,       // )
  kOpenStatement,    // {%
  kCloseStatement,   // %}
  kOpenExpression,   // {{
  kCloseExpression,  // }}
  kOpenBracket,      // [
  kCloseBracket,     // ]
  kOpenBrace,        // {
  kCloseBrace,       // }
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,        // + - ~
  kMultiplicative,  // * / // %
  kPower,           // **
  kComparison,      // < > <= >= == !=
  kUnary,           // a sign that is not followed by a number
  kComment,
};

const char* to_string(TokenType type);

struct Token {
  TokenType type;
  std::string value;
  uint32_t offset;  // in the original source
};

std::vector<Token> tokenize(const SourceInfo& source);

}  // namespace tandem::text::jinja
