// Filters, tests, methods and globals, each as @huggingface/jinja has them
// (filters and methods behave as it does, including where that differs from
// Python's Jinja: strip('x') strips all whitespace, title() only upper-cases
// word starts, `int` on a float floors, ...).
//
// Filters: abs, bool, capitalize, default, dictsort, first, float, indent,
// int, items, join, keys, last, length, list, lower, map(attribute=...),
// rejectattr, replace, reverse, safe, selectattr, sort, string, title,
// tojson, trim, unique, upper, values.
// Tests: boolean, callable, defined, eq, equalto, even, false, integer,
// iterable, lower, mapping, none, number, odd, sequence, string, true,
// undefined, upper.
// String methods: capitalize, endswith, lower, lstrip, replace, rstrip,
// split, startswith, strip, title, upper (and .length); dict methods: get,
// items, keys, values, dictsort; lists: .length.
// Globals: true/false/none (and True/False/None), namespace, range,
// raise_exception, strftime_now.
#pragma once

#include <string>
#include <string_view>

#include "common/text/jinja/ast.h"
#include "common/text/jinja/interpreter.h"
#include "common/text/jinja/value.h"

namespace tandem::text::jinja {

// operand | filter  (filter is the kFilter node; its operand is not evaluated
// here). Throws EvalError.
Value apply_filter(Interpreter& in, const Value& operand, const Expr& filter, const EnvPtr& env);

// operand is [not] name, and the tests selectattr/rejectattr run (with an
// argument). Throws EvalError.
bool run_test(std::string_view name, const Value& operand, const Value* argument);
bool is_known_test(std::string_view name);

// object.key / object[key]: dict entries, list and string items, methods.
// Undefined where there is none. Throws EvalError.
Value get_member(const Value& object, const Value& key);

// true, false, none, namespace, range, raise_exception, strftime_now, ...
void install_globals(Env& env);

// The names install_globals defines (a template input of the same name is an
// error, as in @huggingface/jinja).
bool is_global_name(std::string_view name);

// a op b for every binary operator but and/or (see operators.cpp).
Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b);

// Shared by filters and methods: d.items()/keys()/values() ("items", "keys",
// "values"), d.dictsort(...), and s.replace(old, new, count).
Value dict_view(const Value& dict, std::string_view which);
Value dictsort(const Value& dict, const CallArgs& args);
Value string_replace(Interpreter& in, const std::string& s, const Value* old_value, const Value* new_value,
                     const Value* count);

// Compares two values as sort and dictsort do (numbers with numbers, strings
// with strings); throws EvalError for other pairs.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

}  // namespace tandem::text::jinja
