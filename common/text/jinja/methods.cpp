// Member access (dict entries, list and string items, methods), tests and
// globals. Filters are in filters.cpp.
#include <algorithm>
#include <limits>

#include "common/text/jinja/builtins.h"
#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {
namespace {

const Value* arg_at(const CallArgs& args, size_t i) {
  return i < args.positional.size() ? &args.positional[i] : nullptr;
}

// JavaScript's str.split(sep) (sep not empty).
std::vector<std::string> split_on(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    parts.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  parts.push_back(s.substr(start));
  return parts;
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

// Python's str.split(sep=None, maxsplit=-1), as @huggingface/jinja does it.
Value split(const std::string& s, const CallArgs& args) {
  if (!args.keyword.empty()) eval_unsupported("split() takes no keyword arguments");
  const Value* sep = arg_at(args, 0);
  const Value* max = arg_at(args, 1);
  if (sep && !sep->is_string() && !sep->is_none()) eval_fail("split(): separator must be a string or none");
  if (max && !max->is_int()) eval_fail("split(): maxsplit must be an integer");
  const int64_t maxsplit = max ? max->as_int() : -1;
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    const std::string text = js_trim(s, true, false);
    const std::u32string cps = decode_utf8(text);
    size_t i = 0;
    size_t byte = 0;  // byte offset of cps[i] in text
    auto advance = [&] {
      std::string one;
      append_utf8(one, cps[i]);
      byte += one.size();
      ++i;
    };
    while (i < cps.size()) {
      const size_t word_start = byte;
      while (i < cps.size() && !is_js_space(cps[i])) advance();
      if (maxsplit != -1 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.push_back(text.substr(word_start));
        break;
      }
      parts.push_back(text.substr(word_start, byte - word_start));
      while (i < cps.size() && is_js_space(cps[i])) advance();
    }
  } else {
    if (sep->as_string().empty()) eval_fail("split(): empty separator");
    parts = split_on(s, sep->as_string());
    if (maxsplit != -1 && static_cast<int64_t>(parts.size()) > maxsplit) {
      std::string rest;
      for (size_t k = static_cast<size_t>(maxsplit); k < parts.size(); ++k) {
        if (k > static_cast<size_t>(maxsplit)) rest += sep->as_string();
        rest += parts[k];
      }
      parts.resize(static_cast<size_t>(maxsplit));
      parts.push_back(std::move(rest));
    }
  }
  return string_list(std::move(parts));
}

Value starts_or_ends(const std::string& s, const CallArgs& args, bool starts) {
  const char* name = starts ? "startswith" : "endswith";
  const Value* pattern = arg_at(args, 0);
  if (!pattern) eval_fail("{}() requires an argument", name);
  auto test = [&](const std::string& p) { return starts ? s.starts_with(p) : s.ends_with(p); };
  if (pattern->is_string()) return Value(test(pattern->as_string()));
  if (pattern->is_list()) {
    for (const Value& item : pattern->items()) {
      if (!item.is_string()) eval_fail("{}(): tuple elements must be strings", name);
      if (test(item.as_string())) return Value(true);
    }
    return Value(false);
  }
  eval_fail("{}(): argument must be a string or a tuple of strings", name);
}

Value string_method(const Value& str, std::string_view name) {
  if (name == "length") return Value(js_length(str.as_string()));
  using Fn = Value (*)(const std::string&, const CallArgs&);
  Fn fn = nullptr;
  if (name == "upper") fn = [](const std::string& x, const CallArgs&) { return Value(js_to_upper(x)); };
  if (name == "lower") fn = [](const std::string& x, const CallArgs&) { return Value(js_to_lower(x)); };
  if (name == "strip") fn = [](const std::string& x, const CallArgs&) { return Value(js_trim(x, true, true)); };
  if (name == "lstrip") fn = [](const std::string& x, const CallArgs&) { return Value(js_trim(x, true, false)); };
  if (name == "rstrip") fn = [](const std::string& x, const CallArgs&) { return Value(js_trim(x, false, true)); };
  if (name == "title") fn = [](const std::string& x, const CallArgs&) { return Value(js_title(x)); };
  if (name == "capitalize") fn = [](const std::string& x, const CallArgs&) { return Value(js_capitalize(x)); };
  if (name == "split") fn = [](const std::string& x, const CallArgs& a) { return split(x, a); };
  if (name == "startswith") fn = [](const std::string& x, const CallArgs& a) { return starts_or_ends(x, a, true); };
  if (name == "endswith") fn = [](const std::string& x, const CallArgs& a) { return starts_or_ends(x, a, false); };
  if (name == "replace") {
    return Value::callable("replace", [str](Invocation& inv) {
      const Value* old_value = arg_at(inv.args, 0);
      const Value* new_value = arg_at(inv.args, 1);
      const Value* count = arg_at(inv.args, 2);
      if (!count) count = inv.args.keyword.find("count");
      return string_replace(inv.interpreter, str.as_string(), old_value, new_value, count);
    });
  }
  if (!fn) return Value();
  return Value::callable(std::string(name), [str, fn](Invocation& inv) { return fn(str.as_string(), inv.args); });
}

Value dict_method(const Value& object, std::string_view name) {
  if (name == "get") {
    return Value::callable("get", [object](Invocation& inv) {
      const Value* key = arg_at(inv.args, 0);
      if (!key || !key->is_string()) eval_fail("get(): the key must be a string");
      if (const Value* v = object.as_dict().find(key->as_string())) return *v;
      const Value* fallback = arg_at(inv.args, 1);
      return fallback ? *fallback : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    const std::string which(name);
    return Value::callable(which, [object, which](Invocation&) { return dict_view(object, which); });
  }
  if (name == "dictsort") {
    return Value::callable("dictsort", [object](Invocation& inv) { return dictsort(object, inv.args); });
  }
  return Value();
}

}  // namespace

Value dict_view(const Value& object, std::string_view which) {
  std::vector<Value> out;
  for (const auto& [key, value] : object.as_dict().entries()) {
    if (which == "keys") {
      out.emplace_back(key);
    } else if (which == "values") {
      out.push_back(value);
    } else {
      out.push_back(Value::list({Value(key), value}));
    }
  }
  return Value::list(std::move(out));
}

Value dictsort(const Value& object, const CallArgs& args) {
  const Value* case_sensitive = arg_at(args, 0);
  if (!case_sensitive) case_sensitive = args.keyword.find("case_sensitive");
  const Value* by = arg_at(args, 1);
  if (!by) by = args.keyword.find("by");
  const Value* reverse = arg_at(args, 2);
  if (!reverse) reverse = args.keyword.find("reverse");
  if (case_sensitive && !case_sensitive->is_bool()) eval_fail("dictsort: case_sensitive must be a boolean");
  if (by && !by->is_string()) eval_fail("dictsort: by must be a string");
  if (by && by->as_string() != "key" && by->as_string() != "value") {
    eval_fail("dictsort: by must be 'key' or 'value'");
  }
  if (reverse && !reverse->is_bool()) eval_fail("dictsort: reverse must be a boolean");
  const bool cs = case_sensitive && case_sensitive->as_bool();
  const size_t index = by && by->as_string() == "value" ? 1 : 0;
  const bool rev = reverse && reverse->as_bool();
  std::vector<Value> items = dict_view(object, "items").items();
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int c = compare_values(a.items()[index], b.items()[index], cs);
    return rev ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

Value string_replace(Interpreter& in, const std::string& s, const Value* old_value, const Value* new_value,
                     const Value* count) {
  if (!old_value || !new_value) eval_fail("replace() requires two arguments");
  if (!old_value->is_string() || !new_value->is_string()) eval_fail("replace(): arguments must be strings");
  if (count && !count->is_int() && !count->is_none()) eval_fail("replace(): count must be an integer or none");
  int64_t remaining = count && count->is_int() ? count->as_int() : -1;
  if (remaining == 0) return Value(s);
  if (remaining < 0) remaining = std::numeric_limits<int64_t>::max();
  const std::string& from = old_value->as_string();
  const std::string& to = new_value->as_string();
  std::string out;
  if (from.empty()) {
    // An empty pattern matches before every code point and at the end.
    const std::vector<std::string> cps = js_code_points(s);
    for (const std::string& cp : cps) {
      if (remaining > 0) {
        out += to;
        --remaining;
      }
      out += cp;
      in.check_size(out.size());
    }
    if (remaining > 0) out += to;
  } else {
    size_t start = 0;
    while (remaining > 0) {
      const size_t at = s.find(from, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += to;
      in.check_size(out.size());
      start = at + from.size();
      --remaining;
    }
    out.append(s, start, std::string::npos);
  }
  in.check_size(out.size());
  return Value(std::move(out));
}

Value get_member(const Value& object, const Value& key) {
  if (object.is_dict() || object.is_namespace()) {
    if (!key.is_string()) eval_fail("cannot look up a {} key in a {}", type_name(key), type_name(object));
    if (const Value* v = object.as_dict().find(key.as_string())) return *v;
    return object.is_dict() ? dict_method(object, key.as_string()) : Value();
  }
  if (object.is_list() || object.is_string()) {
    if (key.is_int()) {
      const int64_t i = key.as_int();
      if (object.is_string()) {
        auto c = js_char_at(object.as_string(), i);
        return c ? Value(std::move(*c)) : Value();
      }
      const auto n = static_cast<int64_t>(object.items().size());
      const int64_t idx = i < 0 ? i + n : i;
      return idx >= 0 && idx < n ? object.items()[static_cast<size_t>(idx)] : Value();
    }
    if (key.is_string()) {
      if (object.is_string()) return string_method(object, key.as_string());
      return key.as_string() == "length" ? Value(static_cast<int64_t>(object.items().size())) : Value();
    }
    eval_fail("cannot index a {} with a {}", type_name(object), type_name(key));
  }
  if (!key.is_string()) eval_fail("cannot look up a {} key in a {}", type_name(key), type_name(object));
  return Value();
}

bool is_known_test(std::string_view name) {
  static constexpr std::string_view kTests[] = {
      "boolean", "callable", "odd",     "even",    "false",     "true",    "none",
      "string",  "number",   "integer", "iterable", "mapping",  "sequence", "lower",
      "upper",   "defined",  "undefined", "equalto", "eq"};
  for (std::string_view t : kTests) {
    if (t == name) return true;
  }
  return false;
}

bool run_test(std::string_view name, const Value& v, const Value* argument) {
  if (name == "boolean") return v.is_bool();
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) eval_fail("test '{}' needs an integer, got {}", name, type_name(v));
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "iterable") return (v.is_list() && !v.is_tuple()) || v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "lower") return v.is_string() && v.as_string() == js_to_lower(v.as_string());
  if (name == "upper") return v.is_string() && v.as_string() == js_to_upper(v.as_string());
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "equalto" || name == "eq") {
    if (!argument) eval_fail("test '{}' needs a value to compare with", name);
    return strict_equals(v, *argument);
  }
  eval_unsupported("unsupported test '{}'", name);
}

}  // namespace tandem::text::jinja
