// Binary operators, in @huggingface/jinja's order of cases: == and != first
// (JavaScript loose equality), then undefined and none operands fail (except
// `x in undefined`, which is false), ~ joins string forms, ** on numbers and
// booleans, arithmetic and ordering on numbers (integers stay integers but for
// /, which always gives a float; % and // follow JavaScript: -7 % 3 is -1),
// + on two lists, (not) in on a list, + with a string joins string forms,
// (not) in on strings and dict keys. Anything else fails.
#include <cmath>
#include <limits>

#include "common/text/jinja/builtins.h"
#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {
namespace {

bool numeric_like(const Value& v) { return v.is_int() || v.is_float() || v.is_bool(); }

// An integer result of a JavaScript number operation.
Value integer_result(double d, std::string_view op) {
  constexpr double kLimit = 9223372036854775808.0;
  if (!std::isfinite(d) || d >= kLimit || d < -kLimit) {
    eval_fail("integer result of '{}' is out of range", op);
  }
  return Value(static_cast<int64_t>(d));
}

Value arithmetic(std::string_view op, const Value& left, const Value& right, bool& handled) {
  handled = true;
  const bool is_float = left.is_float() || right.is_float();
  if (op == "+" || op == "-" || op == "*") {
    if (!is_float) {
      int64_t r = 0;
      const int64_t a = left.as_int();
      const int64_t b = right.as_int();
      const bool overflow = op == "+"   ? __builtin_add_overflow(a, b, &r)
                            : op == "-" ? __builtin_sub_overflow(a, b, &r)
                                        : __builtin_mul_overflow(a, b, &r);
      if (overflow) eval_fail("integer overflow in '{}'", op);
      return Value(r);
    }
    const double a = left.as_double();
    const double b = right.as_double();
    return Value(op == "+" ? a + b : op == "-" ? a - b : a * b);
  }
  if (op == "/") return Value(left.as_double() / right.as_double());
  if (op == "//") {
    if (!is_float) {
      if (right.as_int() == 0) eval_fail("integer division by zero");
      return integer_result(std::floor(left.as_double() / right.as_double()), op);
    }
    return Value(std::floor(left.as_double() / right.as_double()));
  }
  if (op == "%") {
    if (!is_float) {
      if (right.as_int() == 0) eval_fail("integer modulo by zero");
      if (right.as_int() == -1) return Value(int64_t{0});
      return Value(left.as_int() % right.as_int());
    }
    return Value(std::fmod(left.as_double(), right.as_double()));
  }
  const double a = left.as_double();
  const double b = right.as_double();
  if (op == "<") return Value(a < b);
  if (op == ">") return Value(a > b);
  if (op == "<=") return Value(a <= b);
  if (op == ">=") return Value(a >= b);
  handled = false;
  return Value();
}

}  // namespace

Value binary_op(Interpreter& in, std::string_view op, const Value& left, const Value& right) {
  if (op == "==") return Value(loose_equals(left, right));
  if (op == "!=") return Value(!loose_equals(left, right));
  const bool membership = op == "in" || op == "not in";
  if (left.is_undefined() || right.is_undefined()) {
    if (right.is_undefined() && membership) return Value(op == "not in");
    eval_fail("cannot apply '{}' to an undefined value ({} and {})", op, type_name(left), type_name(right));
  }
  if (left.is_none() || right.is_none()) {
    eval_fail("cannot apply '{}' to none ({} and {})", op, type_name(left), type_name(right));
  }
  if (op == "~") {
    std::string s = to_js_string(left, in.limits().max_output_bytes);
    s += to_js_string(right, in.limits().max_output_bytes);
    in.check_size(s.size());
    return Value(std::move(s));
  }
  if (op == "**" && numeric_like(left) && numeric_like(right)) {
    const double a = left.as_double();
    const double b = right.as_double();
    if (a == 0 && b < 0) eval_fail("0.0 cannot be raised to a negative power");
    const double r = std::pow(a, b);
    if (!std::isfinite(r)) eval_fail("exponentiation result is not a finite real number");
    if (left.is_float() || right.is_float() || b < 0) return Value(r);
    return integer_result(r, op);
  }
  if (left.is_number() && right.is_number()) {
    bool handled = false;
    Value r = arithmetic(op, left, right, handled);
    if (handled) return r;
  } else if (left.is_list() && right.is_list()) {
    if (op == "+") {
      std::vector<Value> items = left.items();
      items.insert(items.end(), right.items().begin(), right.items().end());
      if (items.size() > in.limits().max_list_size) eval_fail("list longer than {} items", in.limits().max_list_size);
      return Value::list(std::move(items));
    }
  } else if (right.is_list() && membership) {
    in.charge(right.items().size());
    bool found = false;
    for (const Value& item : right.items()) {
      if (strict_equals(item, left)) {
        found = true;
        break;
      }
    }
    return Value(found == (op == "in"));
  }
  if ((left.is_string() || right.is_string()) && op == "+") {
    std::string s = to_js_string(left, in.limits().max_output_bytes);
    s += to_js_string(right, in.limits().max_output_bytes);
    in.check_size(s.size());
    return Value(std::move(s));
  }
  if (left.is_string() && right.is_string() && membership) {
    in.charge(right.as_string().size());
    const bool found = right.as_string().find(left.as_string()) != std::string::npos;
    return Value(found == (op == "in"));
  }
  if (left.is_string() && right.is_dict() && membership) {
    return Value(right.as_dict().contains(left.as_string()) == (op == "in"));
  }
  eval_fail("unsupported operator '{}' between {} and {}", op, type_name(left), type_name(right));
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_none() && b.is_none()) return 0;
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (a.is_none() || b.is_none() || a.is_undefined() || b.is_undefined()) {
    eval_fail("cannot compare {} with {}", type_name(a), type_name(b));
  }
  if (numeric_like(a) && numeric_like(b)) {
    const double x = a.as_double();
    const double y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    // JavaScript compares strings by UTF-16 code units.
    std::u16string x = to_utf16(case_sensitive ? a.as_string() : js_to_lower(a.as_string()));
    std::u16string y = to_utf16(case_sensitive ? b.as_string() : js_to_lower(b.as_string()));
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (type_name(a) != type_name(b)) eval_fail("cannot compare {} with {}", type_name(a), type_name(b));
  eval_fail("cannot compare values of type {}", type_name(a));
}

}  // namespace tandem::text::jinja
