// The value model of the template engine: undefined, none, booleans, 64-bit
// integers, doubles, strings, lists (and tuples), insertion-ordered dicts,
// namespaces and callables (builtins and macros).
//
// Semantics follow @huggingface/jinja, the reference the chat templates are
// checked against, which runs on JavaScript values: numbers print as
// JavaScript prints them (an integral float as "1.0" when printed, as "1"
// when concatenated), booleans as "true"/"false", containers as JSON;
// == is JavaScript's loose equality, lists and dicts compare by identity.
//
// Lists, dicts and namespaces are shared by reference (copying a Value
// copies the reference), as in JavaScript and Python; only namespaces are
// mutated by templates ({% set ns.attr = ... %}).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

namespace tandem::text::jinja {

// A failure while evaluating, without a source position: the interpreter
// adds the template label, line and column of the node being evaluated.
struct EvalError {
  ErrorKind kind;
  std::string message;
};

template <typename... Args>
[[noreturn]] void eval_fail(fmt::format_string<Args...> f, Args&&... args) {
  throw EvalError{ErrorKind::kInvalidInput, fmt::format(f, std::forward<Args>(args)...)};
}

template <typename... Args>
[[noreturn]] void eval_unsupported(fmt::format_string<Args...> f, Args&&... args) {
  throw EvalError{ErrorKind::kUnsupported, fmt::format(f, std::forward<Args>(args)...)};
}

// The default bound on any string built while rendering (RenderLimits has the
// one in force).
inline constexpr size_t kDefaultMaxBytes = size_t{64} << 20;

enum class ValueKind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

class Value;
class Dict;
struct ListData;
struct Callable;

class Value {
 public:
  Value() = default;  // undefined
  static Value none();
  Value(bool b);  // NOLINT(google-explicit-constructor): literals read naturally
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value dict(Dict d);
  static Value namespace_of(Dict d);
  static Value callable(std::string name, std::function<Value(struct Invocation&)> fn);
  // A JavaScript number: an integer where it is integral and fits, else a float.
  static Value number(double d);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }  // tuples included
  bool is_tuple() const;
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_namespace() const { return kind_ == ValueKind::kNamespace; }
  bool is_callable() const { return kind_ == ValueKind::kCallable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // The numeric value of an int, float or bool as a double.
  double as_double() const;
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(data_); }
  const std::vector<Value>& items() const;
  const Dict& as_dict() const;       // dicts and namespaces
  Dict& mutable_namespace() const;   // namespaces only
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  // Identity of a list, dict, namespace or callable (nullptr for scalars).
  const void* identity() const;
  // How deeply the value nests containers (0 for scalars, 1 for a flat list).
  int depth() const;

 private:
  ValueKind kind_ = ValueKind::kUndefined;
  // Strings, like containers, are shared: copying a Value never copies text.
  std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>, std::shared_ptr<ListData>,
               std::shared_ptr<Dict>, std::shared_ptr<const Callable>>
      data_;
};

// Containers record how deeply they nest (a scalar is 0); building one deeper
// than this fails, so that freeing or printing a value never recurses
// without bound ({% set x = [x] %} in a loop).
inline constexpr int kMaxValueDepth = 512;

struct ListData {
  std::vector<Value> items;
  bool tuple = false;
  int depth = 1;
};

// String-keyed map that keeps insertion order; setting an existing key keeps
// its position (JavaScript's Map).
class Dict {
 public:
  using Entry = std::pair<std::string, Value>;
  const Value* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  void set(std::string key, Value value);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  void clear() {
    entries_.clear();
    index_.clear();
  }
  int depth() const { return depth_; }

 private:
  size_t position(std::string_view key) const;  // entries_.size() when absent

  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;  // built once the dict is large
  int depth_ = 1;
};

// Arguments of a call: positional values and keyword arguments in order.
struct CallArgs {
  std::vector<Value> positional;
  Dict keyword;
};

class Interpreter;
struct Env;

// One call of a callable, with the interpreter and the caller's scope
// (macros see their caller's variables, as in @huggingface/jinja).
struct Invocation {
  CallArgs args;
  Interpreter& interpreter;
  std::shared_ptr<Env> env;
};

struct Callable {
  std::string name;
  std::function<Value(Invocation&)> fn;
};

// Jinja-facing type name: "undefined", "none", "boolean", "integer", "float",
// "string", "list", "tuple", "dict", "namespace", "function".
std::string_view type_name(const Value& v);

// Python truthiness as @huggingface/jinja computes it (namespaces and
// functions are always true, NaN is false).
bool truthy(const Value& v);

// How {{ v }} prints v (undefined and none print nothing at block level; this
// is the string for other contexts: "undefined", "null"). Callables cannot be
// printed (JavaScript would print its own source code).
// Fails (EvalError) past max_bytes.
std::string to_output(const Value& v, size_t max_bytes = kDefaultMaxBytes);

// JavaScript's v.value.toString(), used by + and ~ on strings: numbers
// without ".0", lists as their items' printed forms joined by ",", dicts and
// namespaces as "[object Map]".
std::string to_js_string(const Value& v, size_t max_bytes = kDefaultMaxBytes);

// Printed forms of numbers: integers as JavaScript prints the same number,
// floats with ".0" when integral ("-0.0" for negative zero).
std::string format_int(int64_t i);
std::string format_float(double d);

// JavaScript's == on the underlying values, and === (used by `in`, `unique`
// and the equalto test).
bool loose_equals(const Value& a, const Value& b);
bool strict_equals(const Value& a, const Value& b);

}  // namespace tandem::text::jinja
