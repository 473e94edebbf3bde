// Filters. As in @huggingface/jinja, `x | f` and `x | f(...)` are two
// different sets: `3.7 | int` floors while `3.7 | int()` returns 3.7,
// `items | first` works while `items | first()` fails. Both are kept.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "common/text/jinja/builtins.h"
#include "common/text/jinja/json.h"
#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {
namespace {

constexpr std::string_view kKnownFilters[] = {
    "abs",   "bool",  "capitalize", "default", "dictsort", "first",   "float",      "get",  "indent",
    "int",   "items", "join",       "keys",    "last",     "length",  "list",       "lower", "map",
    "rejectattr", "replace", "reverse", "safe", "selectattr", "sort", "string", "title", "tojson",
    "trim",  "unique", "upper",     "values"};

bool is_known_filter(std::string_view name) {
  return std::find(std::begin(kKnownFilters), std::end(kKnownFilters), name) != std::end(kKnownFilters);
}

[[noreturn]] void cannot_apply(std::string_view name, const Value& operand, bool with_args) {
  if (!is_known_filter(name)) eval_unsupported("unsupported filter '{}'", name);
  eval_fail("filter '{}'{} cannot be applied to {}", name, with_args ? " with arguments" : "", type_name(operand));
}

// What JavaScript's Array.prototype.join writes for one item's raw value.
std::string join_item(const Value& v, size_t max_bytes) {
  if (v.is_undefined() || v.is_none()) return "";
  return to_js_string(v, max_bytes);
}

Value join(Interpreter& in, const std::vector<Value>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += join_item(items[i], in.limits().max_output_bytes);
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

// JavaScript truthiness of a raw value (objects are always true).
bool js_truthy(const Value& v) {
  return v.is_list() || v.is_dict() || v.is_namespace() || v.is_callable() || truthy(v);
}

Value indent(Interpreter& in, const std::string& s, int64_t width, bool first, bool blank) {
  if (width < 0) eval_fail("indent: width must not be negative");
  if (width > 1024) eval_fail("indent: width {} is too large (at most 1024)", width);
  const std::string pad(static_cast<size_t>(width), ' ');
  std::string out;
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t end = s.find('\n', start);
    const std::string_view text(s.data() + start, (end == std::string::npos ? s.size() : end) - start);
    if ((first || line > 0) && (blank || !text.empty())) out += pad;
    out += text;
    in.check_size(out.size());
    if (end == std::string::npos) break;
    out.push_back('\n');
    start = end + 1;
  }
  return Value(std::move(out));
}

// A key that is equal for two values exactly when JavaScript's Set (which
// compares with SameValueZero) sees them as the same.
std::string same_value_zero_key(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return "u";
    case ValueKind::kNone: return "z";
    case ValueKind::kBool: return v.as_bool() ? "t" : "f";
    case ValueKind::kInt:
    case ValueKind::kFloat: {
      const double d = v.as_double();
      return std::isnan(d) ? "nNaN" : "n" + js_number_to_string(d == 0 ? 0.0 : d);
    }
    case ValueKind::kString: return "s" + v.as_string();
    case ValueKind::kList:
    case ValueKind::kDict:
    case ValueKind::kNamespace:
    case ValueKind::kCallable: return fmt::format("o{}", v.identity());
  }
  return "";
}

Value unique(const std::vector<Value>& items) {
  std::vector<Value> out;
  std::unordered_set<std::string> seen;
  for (const Value& item : items) {
    if (seen.insert(same_value_zero_key(item)).second) out.push_back(item);
  }
  return Value::list(std::move(out));
}

// item.a.b (dotted path; list items by index), undefined where missing.
Value attribute_value(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_dict() || v.is_namespace()) {
      const Value* found = v.as_dict().find(part);
      v = found ? *found : Value();
    } else if (v.is_list()) {
      const auto idx = js_parse_int(part);
      if (!idx || *idx < 0 || *idx >= static_cast<double>(v.items().size())) return Value();
      v = v.items()[static_cast<size_t>(*idx)];
    } else {
      return Value();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

const Value* pick(const CallArgs& args, size_t i, std::string_view keyword) {
  if (i < args.positional.size()) return &args.positional[i];
  return args.keyword.find(keyword);
}

bool bool_arg(const CallArgs& args, size_t i, std::string_view keyword, std::string_view filter) {
  const Value* v = pick(args, i, keyword);
  if (!v) return false;
  if (!v->is_bool()) eval_fail("{}: {} must be a boolean", filter, keyword);
  return v->as_bool();
}

Value sort(const std::vector<Value>& items, const CallArgs& args) {
  const bool reverse = bool_arg(args, 0, "reverse", "sort");
  const bool case_sensitive = bool_arg(args, 1, "case_sensitive", "sort");
  const Value* attribute = pick(args, 2, "attribute");
  if (attribute && !attribute->is_string() && !attribute->is_int() && !attribute->is_none()) {
    eval_fail("sort: attribute must be a string, an integer or none");
  }
  std::string path;
  const bool by_attribute = attribute && !attribute->is_none();
  if (by_attribute) path = attribute->is_int() ? format_int(attribute->as_int()) : attribute->as_string();
  std::vector<Value> out = items;
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
    const int c = by_attribute ? compare_values(attribute_value(a, path), attribute_value(b, path), case_sensitive)
                               : compare_values(a, b, case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(out));
}

Value select_by_attribute(Interpreter& in, const Value& operand, const Expr& filter, const EnvPtr& env) {
  const bool select = filter.name == "selectattr";
  for (const Value& item : operand.items()) {
    if (!item.is_dict() && !item.is_namespace()) eval_fail("{} can only be applied to a list of dicts", filter.name);
  }
  std::vector<Value> args;
  for (const Arg& a : filter.args) {
    if (a.kind != ArgKind::kPositional || a.value->kind != ExprKind::kLiteral || !a.value->literal.is_string()) {
      eval_unsupported("{}: arguments must be string literals", filter.name);
    }
    args.push_back(in.eval(*a.value, env));
  }
  if (args.size() >= 2 && !is_known_test(args[1].as_string())) {
    eval_unsupported("unsupported test '{}'", args[1].as_string());
  }
  std::vector<Value> out;
  for (const Value& item : operand.items()) {
    const Value* a = args.empty() ? nullptr : item.as_dict().find(args[0].as_string());
    bool result = false;
    if (a) result = args.size() >= 2 ? run_test(args[1].as_string(), *a, args.size() >= 3 ? &args[2] : nullptr)
                                     : truthy(*a);
    if (result == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value map_attribute(const Value& operand, const CallArgs& args) {
  const Value* attribute = args.keyword.find("attribute");
  if (!attribute) eval_unsupported("map: only map(attribute=...) is supported");
  if (!attribute->is_string()) eval_fail("map: attribute must be a string");
  const Value* fallback = args.keyword.find("default");
  std::vector<Value> out;
  for (const Value& item : operand.items()) {
    if (!item.is_dict() && !item.is_namespace()) eval_fail("map: items must be dicts, got a {}", type_name(item));
    Value v = attribute_value(item, attribute->as_string());
    out.push_back(v.is_undefined() && fallback ? *fallback : v);
  }
  return Value::list(std::move(out));
}

Value tojson(const Value& operand, const CallArgs& args, size_t max_bytes) {
  JsonOptions options;
  options.max_bytes = max_bytes;
  if (const Value* indent = args.keyword.find("indent")) {
    if (!indent->is_int() && !indent->is_none()) eval_fail("tojson: indent must be an integer");
    if (indent->is_int()) options.indent = indent->as_int();
  }
  if (const Value* ascii = args.keyword.find("ensure_ascii")) {
    if (!ascii->is_bool()) eval_fail("tojson: ensure_ascii must be a boolean");
    options.ensure_ascii = ascii->as_bool();
  }
  if (const Value* sort_keys = args.keyword.find("sort_keys")) {
    if (!sort_keys->is_bool()) eval_fail("tojson: sort_keys must be a boolean");
    options.sort_keys = sort_keys->as_bool();
  }
  if (const Value* seps = args.keyword.find("separators")) {
    if (seps->is_list()) {
      if (seps->items().size() != 2 || !seps->items()[0].is_string() || !seps->items()[1].is_string()) {
        eval_fail("tojson: separators must be two strings");
      }
      options.separators = std::make_pair(seps->items()[0].as_string(), seps->items()[1].as_string());
    } else if (!seps->is_none()) {
      eval_fail("tojson: separators must be two strings");
    }
  }
  return Value(to_json(operand, options, true));
}

Value number_filter(const Value& operand, std::string_view name) {
  if (name == "abs") {
    if (operand.is_float()) return Value(std::fabs(operand.as_float()));
    if (operand.as_int() == std::numeric_limits<int64_t>::min()) eval_fail("abs: integer overflow");
    return Value(operand.as_int() < 0 ? -operand.as_int() : operand.as_int());
  }
  if (name == "int") {
    if (operand.is_int()) return operand;
    const double f = std::floor(operand.as_float());
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) eval_fail("int: {} is out of range", format_float(f));
    return Value(static_cast<int64_t>(f));
  }
  if (name == "float") return Value(operand.as_double());
  if (name == "string") return Value(to_output(operand));
  cannot_apply(name, operand, false);
}

Value parse_number(const std::string& s, bool integer, const Value& fallback) {
  const auto v = integer ? js_parse_int(s) : js_parse_float(s);
  if (!v) return fallback;
  if (!integer) return Value(*v);
  if (std::fabs(*v) >= 9.2e18) eval_fail("int: '{}' is out of range", s);
  return Value(static_cast<int64_t>(*v));
}

// x | name, without parentheses.
Value plain_filter(Interpreter& in, const Value& operand, std::string_view name) {
  if (name == "safe") return operand;
  if (name == "tojson") return tojson(operand, CallArgs{}, in.limits().max_output_bytes);
  if (operand.is_list()) {
    const std::vector<Value>& items = operand.items();
    if (name == "list") return operand;
    if (name == "first") return items.empty() ? Value() : items.front();
    if (name == "last") return items.empty() ? Value() : items.back();
    if (name == "length") return Value(static_cast<int64_t>(items.size()));
    if (name == "reverse") return Value::list(std::vector<Value>(items.rbegin(), items.rend()));
    if (name == "sort") return sort(items, CallArgs{});
    if (name == "join") return join(in, items, "");
    if (name == "string") return Value(to_output(operand, in.limits().max_output_bytes));
    if (name == "unique") return unique(items);
  } else if (operand.is_string()) {
    const std::string& s = operand.as_string();
    if (name == "length") return Value(js_length(s));
    if (name == "upper") return Value(js_to_upper(s));
    if (name == "lower") return Value(js_to_lower(s));
    if (name == "title") return Value(js_title(s));
    if (name == "capitalize") return Value(js_capitalize(s));
    if (name == "trim") return Value(js_trim(s, true, true));
    if (name == "indent") return indent(in, s, 4, false, false);
    if (name == "join" || name == "string") return operand;
    if (name == "int") return parse_number(s, true, Value(int64_t{0}));
    if (name == "float") return parse_number(s, false, Value(0.0));
  } else if (operand.is_number()) {
    return number_filter(operand, name);
  } else if (operand.is_dict()) {
    if (name == "items" || name == "keys" || name == "values") return dict_view(operand, name);
    if (name == "length") return Value(static_cast<int64_t>(operand.as_dict().size()));
    if (name == "dictsort") return dictsort(operand, CallArgs{});
    if (name == "get") eval_fail("filter 'get' needs a key");
  } else if (operand.is_bool()) {
    if (name == "bool") return operand;
    if (name == "int") return Value(int64_t{operand.as_bool() ? 1 : 0});
    if (name == "float") return Value(operand.as_bool() ? 1.0 : 0.0);
    if (name == "string") return Value(operand.as_bool() ? "true" : "false");
  }
  cannot_apply(name, operand, false);
}

// x | name(args).
Value called_filter(Interpreter& in, const Value& operand, const Expr& filter, const EnvPtr& env) {
  const std::string& name = filter.name;
  if (operand.is_list() && (name == "selectattr" || name == "rejectattr")) {
    return select_by_attribute(in, operand, filter, env);
  }
  const CallArgs args = in.eval_args(filter.args, env);
  if (name == "tojson") return tojson(operand, args, in.limits().max_output_bytes);
  if (name == "join") {
    std::vector<Value> items;
    if (operand.is_string()) {
      for (auto& cp : js_code_points(operand.as_string())) items.emplace_back(std::move(cp));
    } else if (operand.is_list()) {
      items = operand.items();
    } else {
      cannot_apply(name, operand, true);
    }
    const Value* sep = pick(args, 0, "separator");
    if (sep && !sep->is_string()) eval_fail("join: separator must be a string");
    return join(in, items, sep ? sep->as_string() : "");
  }
  if (name == "int" || name == "float") {
    const bool integer = name == "int";
    const Value* fallback = pick(args, 0, "default");
    const Value zero = integer ? Value(int64_t{0}) : Value(0.0);
    if (operand.is_string()) return parse_number(operand.as_string(), integer, fallback ? *fallback : zero);
    if (operand.is_number()) return operand;
    if (operand.is_bool()) return integer ? Value(int64_t{operand.as_bool()}) : Value(operand.as_bool() ? 1.0 : 0.0);
    cannot_apply(name, operand, true);
  }
  if (name == "default") {
    const Value fallback = args.positional.empty() ? Value("") : args.positional[0];
    const Value* boolean = args.positional.size() > 1 ? &args.positional[1] : args.keyword.find("boolean");
    if (boolean && !boolean->is_bool()) eval_fail("default: the second argument must be a boolean");
    if (operand.is_undefined() || (boolean && boolean->as_bool() && !truthy(operand))) return fallback;
    return operand;
  }
  if (operand.is_list()) {
    if (name == "sort") return sort(operand.items(), args);
    if (name == "map") return map_attribute(operand, args);
  } else if (operand.is_string()) {
    if (name == "indent") {
      const Value* width = pick(args, 0, "width");
      if (width && !width->is_int()) eval_fail("indent: width must be an integer");
      const Value* first = pick(args, 1, "first");
      const Value* blank = pick(args, 2, "blank");
      return indent(in, operand.as_string(), width ? width->as_int() : 4, first && js_truthy(*first),
                    blank && js_truthy(*blank));
    }
    if (name == "replace") {
      const Value* count = args.positional.size() > 2 ? &args.positional[2] : args.keyword.find("count");
      return string_replace(in, operand.as_string(), args.positional.empty() ? nullptr : &args.positional[0],
                            args.positional.size() > 1 ? &args.positional[1] : nullptr, count);
    }
  } else if (operand.is_dict()) {
    if (name == "get") {
      const Value* key = args.positional.empty() ? nullptr : &args.positional[0];
      if (!key || !key->is_string()) eval_fail("get: the key must be a string");
      if (const Value* v = operand.as_dict().find(key->as_string())) return *v;
      return args.positional.size() > 1 ? args.positional[1] : Value::none();
    }
    if (name == "items" || name == "keys" || name == "values") return dict_view(operand, name);
    if (name == "dictsort") return dictsort(operand, args);
  }
  cannot_apply(name, operand, true);
}

}  // namespace

Value apply_filter(Interpreter& in, const Value& operand, const Expr& filter, const EnvPtr& env) {
  if (!is_known_filter(filter.name)) eval_unsupported("unsupported filter '{}'", filter.name);
  return filter.flag ? called_filter(in, operand, filter, env) : plain_filter(in, operand, filter.name);
}

}  // namespace tandem::text::jinja
