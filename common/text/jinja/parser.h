// Tokens -> syntax tree, with @huggingface/jinja's grammar:
//   statements: if/elif/else, for/else (with an inline `if` filter, tuple
//   targets), set (=, block form, tuple targets, namespace attributes), macro,
//   call blocks, filter blocks, break, continue, comments;
//   expressions, loosest first: `a if c else b` (and `a if c`), or, and, not,
//   comparisons and (not) in (left-associative, not chained), + - ~, * / // %,
//   **, `is [not] test`, `| filter[(args)]`, unary signs, calls, members,
//   subscripts and slices; literals: numbers, strings (adjacent ones joined),
//   lists, tuples, dicts.
// Anything else (include, import, extends, block, raw, with, do, ...) is an
// error naming the statement, line and column.
#pragma once

#include <vector>

#include "common/text/jinja/ast.h"
#include "common/text/jinja/lexer.h"

namespace tandem::text::jinja {

std::vector<Stmt> parse(const std::vector<Token>& tokens, const SourceInfo& source);

}  // namespace tandem::text::jinja
