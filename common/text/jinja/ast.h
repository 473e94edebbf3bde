// The syntax tree of a template. Every node keeps the byte offset in the
// original source it starts at, so runtime errors can name line and column.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/text/jinja/value.h"

namespace tandem::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,     // literal
  kIdentifier,  // name
  kList,        // items
  kTuple,       // items
  kDict,        // items: key, value, key, value, ...
  kMember,      // items[0][items[1]]; a.b is items[1] = literal "b", a.0 literal 0
  kSlice,       // items: start, stop, step (each may be null); only as a member key
  kCall,        // items[0](args)
  kFilter,      // items[0] | name  or  items[0] | name(args) (flag: with parentheses)
  kTest,        // items[0] is [not] name (flag: negated)
  kUnary,       // name ("not", "-", "+") items[0]
  kBinary,      // items[0] name items[1]; name is the operator ("and", "in", "not in", ...)
  kTernary,     // items[1] if items[0] else items[2]
  kSelect,      // items[0] if items[1] (no else: undefined when false)
};

enum class ArgKind { kPositional, kKeyword, kSpread, kKeywordSpread };

struct Arg {
  ArgKind kind;
  std::string name;  // kKeyword: the keyword; parameters: the parameter name
  ExprPtr value;     // parameters: the default (null when none)
};

struct Expr {
  ExprKind kind;
  uint32_t offset;
  uint32_t height = 1;  // of the subtree (bounded by the parser: evaluation recurses on it)
  std::string name;
  Value literal;
  bool flag = false;
  std::vector<ExprPtr> items;
  std::vector<Arg> args;
};

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // expr, body, alternate
  kFor,          // {% for target in expr [if condition] %} body {% else %} alternate
  kSet,          // {% set target = expr %}, or {% set target %}body{% endset %} (expr null)
  kMacro,        // name, params, body
  kCallBlock,    // {% call(params) expr %} body
  kFilterBlock,  // {% filter expr %} body; expr is a kFilter whose operand is null
  kBreak,
  kContinue,
  kComment,
};

struct Stmt {
  StmtKind kind;
  uint32_t offset;
  std::string text;  // kText: the text; kMacro: the name
  ExprPtr expr;
  ExprPtr target;
  ExprPtr condition;  // kFor: the inline filter
  std::vector<Arg> params;
  std::vector<Stmt> body;
  std::vector<Stmt> alternate;
};

}  // namespace tandem::text::jinja
