#include "common/text/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/text/jinja/json.h"
#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}

Value::Value(bool b) : kind_(ValueKind::kBool), data_(b) {}
Value::Value(int64_t i) : kind_(ValueKind::kInt), data_(i) {}
Value::Value(double d) : kind_(ValueKind::kFloat), data_(d) {}
Value::Value(std::string s)
    : kind_(ValueKind::kString), data_(std::make_shared<const std::string>(std::move(s))) {}

namespace {

int list_depth(const std::vector<Value>& items) {
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  if (depth + 1 > kMaxValueDepth) eval_fail("value nested deeper than {} levels", kMaxValueDepth);
  return depth + 1;
}

}  // namespace

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = ValueKind::kList;
  const int depth = list_depth(items);
  v.data_ = std::make_shared<ListData>(ListData{std::move(items), false, depth});
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v;
  v.kind_ = ValueKind::kList;
  const int depth = list_depth(items);
  v.data_ = std::make_shared<ListData>(ListData{std::move(items), true, depth});
  return v;
}

int Value::depth() const {
  switch (kind_) {
    case ValueKind::kList: return std::get<std::shared_ptr<ListData>>(data_)->depth;
    case ValueKind::kDict:
    case ValueKind::kNamespace: return std::get<std::shared_ptr<Dict>>(data_)->depth();
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kString:
    case ValueKind::kCallable:
      break;
  }
  return 0;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = ValueKind::kDict;
  v.data_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::namespace_of(Dict d) {
  Value v;
  v.kind_ = ValueKind::kNamespace;
  v.data_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::callable(std::string name, std::function<Value(Invocation&)> fn) {
  Value v;
  v.kind_ = ValueKind::kCallable;
  v.data_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::number(double d) {
  // 2^63 is exactly representable; anything integral below it fits in int64.
  constexpr double kLimit = 9223372036854775808.0;
  if (std::isfinite(d) && d == std::floor(d) && d >= -kLimit && d < kLimit) {
    return Value(static_cast<int64_t>(d));
  }
  return Value(d);
}

bool Value::is_tuple() const {
  return is_list() && std::get<std::shared_ptr<ListData>>(data_)->tuple;
}

double Value::as_double() const {
  switch (kind_) {
    case ValueKind::kInt: return static_cast<double>(as_int());
    case ValueKind::kFloat: return as_float();
    case ValueKind::kBool: return as_bool() ? 1.0 : 0.0;
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kString:
    case ValueKind::kList:
    case ValueKind::kDict:
    case ValueKind::kNamespace:
    case ValueKind::kCallable:
      break;
  }
  eval_fail("expected a number, got {}", type_name(*this));
}

const std::vector<Value>& Value::items() const {
  return std::get<std::shared_ptr<ListData>>(data_)->items;
}

const Dict& Value::as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }

Dict& Value::mutable_namespace() const {
  if (!is_namespace()) eval_fail("cannot assign an attribute of a {} (only of a namespace)", type_name(*this));
  return *std::get<std::shared_ptr<Dict>>(data_);
}

const void* Value::identity() const {
  switch (kind_) {
    case ValueKind::kList: return std::get<std::shared_ptr<ListData>>(data_).get();
    case ValueKind::kDict:
    case ValueKind::kNamespace: return std::get<std::shared_ptr<Dict>>(data_).get();
    case ValueKind::kCallable: return std::get<std::shared_ptr<const Callable>>(data_).get();
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kString:
      break;
  }
  return nullptr;
}

// Small dicts (most of them: messages, tool calls) are searched linearly;
// an index is built once a dict grows past kIndexFrom entries.
constexpr size_t kIndexFrom = 16;

size_t Dict::position(std::string_view key) const {
  if (index_.empty()) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].first == key) return i;
    }
    return entries_.size();
  }
  auto it = index_.find(std::string(key));
  return it == index_.end() ? entries_.size() : it->second;
}

const Value* Dict::find(std::string_view key) const {
  const size_t i = position(key);
  return i < entries_.size() ? &entries_[i].second : nullptr;
}

void Dict::set(std::string key, Value value) {
  const int depth = value.depth() + 1;
  if (depth > kMaxValueDepth) eval_fail("value nested deeper than {} levels", kMaxValueDepth);
  depth_ = std::max(depth_, depth);
  if (const size_t i = position(key); i < entries_.size()) {
    entries_[i].second = std::move(value);
    return;
  }
  entries_.emplace_back(std::move(key), std::move(value));
  if (!index_.empty()) {
    index_.emplace(entries_.back().first, entries_.size() - 1);
  } else if (entries_.size() > kIndexFrom) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  }
}

std::string_view type_name(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return "undefined";
    case ValueKind::kNone: return "none";
    case ValueKind::kBool: return "boolean";
    case ValueKind::kInt: return "integer";
    case ValueKind::kFloat: return "float";
    case ValueKind::kString: return "string";
    case ValueKind::kList: return v.is_tuple() ? "tuple" : "list";
    case ValueKind::kDict: return "dict";
    case ValueKind::kNamespace: return "namespace";
    case ValueKind::kCallable: return "function";
  }
  return "value";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return false;
    case ValueKind::kBool: return v.as_bool();
    case ValueKind::kInt: return v.as_int() != 0;
    case ValueKind::kFloat: return v.as_float() != 0 && !std::isnan(v.as_float());
    case ValueKind::kString: return !v.as_string().empty();
    case ValueKind::kList: return !v.items().empty();
    case ValueKind::kDict: return !v.as_dict().empty();
    case ValueKind::kNamespace:
    case ValueKind::kCallable: return true;
  }
  return false;
}

std::string format_int(int64_t i) {
  constexpr int64_t kExact = int64_t{1} << 53;
  if (i >= -kExact && i <= kExact) return std::to_string(i);
  return js_number_to_string(static_cast<double>(i));
}

std::string format_float(double d) {
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e21) return fmt::format("{:.1f}", d);
  return js_number_to_string(d);
}

std::string to_output(const Value& v, size_t max_bytes) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return "undefined";
    case ValueKind::kNone: return "null";
    case ValueKind::kBool: return v.as_bool() ? "true" : "false";
    case ValueKind::kInt: return format_int(v.as_int());
    case ValueKind::kFloat: return format_float(v.as_float());
    case ValueKind::kString: return v.as_string();
    case ValueKind::kList:
    case ValueKind::kDict:
    case ValueKind::kNamespace: {
      JsonOptions options;
      options.max_bytes = max_bytes;
      return to_json(v, options, /*undefined_as_null=*/false);
    }
    case ValueKind::kCallable: break;
  }
  eval_unsupported("cannot print function '{}'", v.as_callable().name);
}

std::string to_js_string(const Value& v, size_t max_bytes) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return "undefined";
    case ValueKind::kNone: return "null";
    case ValueKind::kBool: return v.as_bool() ? "true" : "false";
    case ValueKind::kInt: return format_int(v.as_int());
    case ValueKind::kFloat: return js_number_to_string(v.as_float());
    case ValueKind::kString: return v.as_string();
    case ValueKind::kList: {
      std::string out;
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out.push_back(',');
        first = false;
        out += to_output(item, max_bytes);
        if (out.size() > max_bytes) eval_fail("output larger than {} bytes", max_bytes);
      }
      return out;
    }
    case ValueKind::kDict:
    case ValueKind::kNamespace: return "[object Map]";
    case ValueKind::kCallable: break;
  }
  eval_unsupported("cannot convert function '{}' to a string", v.as_callable().name);
}

namespace {

bool is_object(const Value& v) {
  return v.is_list() || v.is_dict() || v.is_namespace() || v.is_callable();
}

}  // namespace

bool loose_equals(const Value& a, const Value& b) {
  const bool a_nullish = a.is_undefined() || a.is_none();
  const bool b_nullish = b.is_undefined() || b.is_none();
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (is_object(a) && is_object(b)) return a.identity() == b.identity();
  if (a.is_bool()) return loose_equals(Value(a.as_bool() ? 1 : 0), b);
  if (b.is_bool()) return loose_equals(a, Value(b.as_bool() ? 1 : 0));
  // An object against a primitive compares as its string form.
  if (is_object(a)) return !a.is_callable() && loose_equals(Value(to_js_string(a)), b);
  if (is_object(b)) return !b.is_callable() && loose_equals(a, Value(to_js_string(b)));
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_number()) return a.as_double() == js_string_to_number(b.as_string());
  return js_string_to_number(a.as_string()) == b.as_double();
}

bool strict_equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return true;
    case ValueKind::kBool: return a.as_bool() == b.as_bool();
    case ValueKind::kString: return a.as_string() == b.as_string();
    case ValueKind::kInt:
    case ValueKind::kFloat: return false;  // handled above
    case ValueKind::kList:
    case ValueKind::kDict:
    case ValueKind::kNamespace:
    case ValueKind::kCallable: return a.identity() == b.identity();
  }
  return false;
}

}  // namespace tandem::text::jinja
