// Expression evaluation (the statement side is in interpreter.cpp).
#include <algorithm>
#include <limits>
#include <optional>

#include "common/text/jinja/builtins.h"
#include "common/text/jinja/interpreter.h"
#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {

Value Interpreter::eval_node(const Expr& e, const EnvPtr& env) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kIdentifier: {
      const Value* v = env->lookup(e.name);
      return v ? *v : Value();
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const ExprPtr& item : e.items) items.push_back(eval(*item, env));
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        const Value key = eval(*e.items[i], env);
        if (!key.is_string()) eval_fail("dict keys must be strings, got {}", type_name(key));
        d.set(key.as_string(), eval(*e.items[i + 1], env));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kMember: return eval_member(e, env);
    case ExprKind::kSlice: eval_fail("a slice can only be used inside [...]");
    case ExprKind::kCall: return eval_call(e, env);
    case ExprKind::kFilter: return apply_filter(*this, eval(*e.items[0], env), e, env);
    case ExprKind::kTest: {
      const Value operand = eval(*e.items[0], env);
      if (!is_known_test(e.name)) eval_unsupported("unsupported test '{}'", e.name);
      return Value(run_test(e.name, operand, nullptr) != e.flag);
    }
    case ExprKind::kUnary: {
      const Value v = eval(*e.items[0], env);
      if (e.name == "not") return Value(!truthy(v));
      const bool negate = e.name == "-";
      if (v.is_float()) return Value(negate ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        const int64_t i = v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int();
        if (negate && i == std::numeric_limits<int64_t>::min()) eval_fail("integer overflow in unary '-'");
        return Value(negate ? -i : i);
      }
      eval_fail("unary '{}' cannot be applied to {}", e.name, type_name(v));
    }
    case ExprKind::kBinary: {
      if (e.name == "and" || e.name == "or") {
        Value left = eval(*e.items[0], env);
        if (truthy(left) == (e.name == "or")) return left;
        return eval(*e.items[1], env);
      }
      const Value left = eval(*e.items[0], env);
      const Value right = eval(*e.items[1], env);
      return binary_op(*this, e.name, left, right);
    }
    case ExprKind::kTernary:
      return truthy(eval(*e.items[0], env)) ? eval(*e.items[1], env) : eval(*e.items[2], env);
    case ExprKind::kSelect: return truthy(eval(*e.items[1], env)) ? eval(*e.items[0], env) : Value();
  }
  return Value();
}

Value Interpreter::eval_slice(const Value& object, const Expr& slice, const EnvPtr& env) {
  if (!object.is_list() && !object.is_string()) eval_fail("cannot slice a {}", type_name(object));
  std::optional<int64_t> parts[3];
  for (size_t i = 0; i < 3; ++i) {
    if (!slice.items[i]) continue;
    const Value v = eval(*slice.items[i], env);
    if (v.is_undefined()) continue;
    if (!v.is_int()) eval_fail("slice indices must be integers, got {}", type_name(v));
    parts[i] = v.as_int();
  }
  std::vector<std::string> chars;
  if (object.is_string()) chars = js_code_points(object.as_string());
  const auto n = static_cast<int64_t>(object.is_string() ? chars.size() : object.items().size());
  const int64_t step = parts[2].value_or(1);
  int64_t start = 0;
  int64_t stop = 0;
  if (step >= 0) {
    start = parts[0] ? (*parts[0] < 0 ? std::max<int64_t>(n + *parts[0], 0) : std::min(*parts[0], n)) : 0;
    stop = parts[1] ? (*parts[1] < 0 ? std::max<int64_t>(n + *parts[1], 0) : std::min(*parts[1], n)) : n;
  } else {
    start = parts[0] ? (*parts[0] < 0 ? std::max<int64_t>(n + *parts[0], -1) : std::min(*parts[0], n - 1)) : n - 1;
    stop = parts[1] ? (*parts[1] < -1 ? std::max<int64_t>(n + *parts[1], -1) : std::min(*parts[1], n - 1)) : -1;
  }
  std::vector<size_t> picked;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) picked.push_back(static_cast<size_t>(i));
  } else if (step < 0) {
    for (int64_t i = start; i > stop; i += step) picked.push_back(static_cast<size_t>(i));
  }
  if (object.is_string()) {
    std::string out;
    for (size_t i : picked) out += chars[i];
    return Value(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(picked.size());
  for (size_t i : picked) out.push_back(object.items()[i]);
  return Value::list(std::move(out));
}

Value Interpreter::eval_member(const Expr& e, const EnvPtr& env) {
  const Value object = eval(*e.items[0], env);
  const Expr& key = *e.items[1];
  if (key.kind == ExprKind::kSlice) return eval_slice(object, key, env);
  return get_member(object, eval(key, env));
}

Value Interpreter::eval_call(const Expr& e, const EnvPtr& env) {
  CallArgs args = eval_args(e.args, env);
  const Expr& callee = *e.items[0];
  const Value fn = eval(callee, env);
  if (!fn.is_callable()) {
    if (callee.kind == ExprKind::kIdentifier && fn.is_undefined()) {
      eval_unsupported("unknown function '{}'", callee.name);
    }
    if (callee.kind == ExprKind::kMember && fn.is_undefined() && callee.items[1]->kind == ExprKind::kLiteral &&
        callee.items[1]->literal.is_string()) {
      const Value object = eval(*callee.items[0], env);
      const std::string& method = callee.items[1]->literal.as_string();
      if (object.is_list() || object.is_string() || object.is_dict()) {
        eval_unsupported("unsupported method '{}' on {}", method, type_name(object));
      }
      eval_fail("cannot call method '{}' on {}", method, type_name(object));
    }
    eval_fail("cannot call a {}", type_name(fn));
  }
  return call(fn, std::move(args), env);
}

}  // namespace tandem::text::jinja
