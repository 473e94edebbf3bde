// The global names every template sees.
#include <cmath>
#include <ctime>

#include "common/text/jinja/builtins.h"
#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {
namespace {

constexpr std::string_view kGlobalNames[] = {"true",  "false",           "none",  "True",        "False",
                                             "None",  "raise_exception", "range", "strftime_now", "namespace"};

void no_keywords(const CallArgs& args, std::string_view fn) {
  if (!args.keyword.empty()) {
    eval_unsupported("{}() takes no keyword arguments (got '{}')", fn, args.keyword.entries().front().first);
  }
}

Value make_namespace(Invocation& inv) {
  const CallArgs& args = inv.args;
  if (args.positional.size() > 1) eval_fail("namespace() takes at most 1 positional argument");
  Dict entries;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      for (const auto& [k, v] : source.as_dict().entries()) entries.set(k, v);
    } else if (source.is_list()) {
      for (const Value& pair : source.items()) {
        std::vector<Value> kv;
        if (pair.is_list()) kv = pair.items();
        if (pair.is_string()) {
          for (auto& cp : js_code_points(pair.as_string())) kv.emplace_back(std::move(cp));
        }
        if (kv.size() != 2) eval_fail("namespace() expects a dict or a list of [key, value] pairs");
        if (!kv[0].is_string()) eval_fail("namespace() keys must be strings");
        entries.set(kv[0].as_string(), kv[1]);
      }
    } else {
      eval_fail("namespace() cannot take a {}", type_name(source));
    }
  }
  for (const auto& [k, v] : args.keyword.entries()) entries.set(k, v);
  Value ns = Value::namespace_of(std::move(entries));
  inv.interpreter.track_namespace(ns);
  return ns;
}

Value raise_exception(Invocation& inv) {
  const std::string message = inv.args.positional.empty() ? "undefined" : to_js_string(inv.args.positional[0]);
  throw EvalError{ErrorKind::kInvalidInput, message};
}

Value range(Invocation& inv) {
  const CallArgs& args = inv.args;
  no_keywords(args, "range");
  if (args.positional.empty() || args.positional.size() > 3) eval_fail("range() takes 1 to 3 arguments");
  for (const Value& a : args.positional) {
    if (!a.is_number()) eval_fail("range() arguments must be numbers, got {}", type_name(a));
  }
  double start = 0;
  double stop = args.positional[0].as_double();
  double step = 1;
  if (args.positional.size() >= 2) {
    start = args.positional[0].as_double();
    stop = args.positional[1].as_double();
  }
  if (args.positional.size() == 3) step = args.positional[2].as_double();
  if (step == 0) eval_fail("range() step must not be zero");
  const double count = std::ceil((stop - start) / step);
  const size_t max = inv.interpreter.limits().max_list_size;
  if (count > static_cast<double>(max)) eval_fail("range() of more than {} items", max);
  std::vector<Value> items;
  for (double i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value::number(i));
  return Value::list(std::move(items));
}

Value strftime_now(Invocation& inv) {
  no_keywords(inv.args, "strftime_now");
  if (inv.args.positional.empty() || !inv.args.positional[0].is_string()) {
    eval_fail("strftime_now() takes a format string");
  }
  static constexpr const char* kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                            "July",    "August",   "September", "October", "November", "December"};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  const std::string& format = inv.args.positional[0].as_string();
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out.push_back(format[i]);
      continue;
    }
    const char c = format[i + 1];
    switch (c) {
      case 'Y': out += std::to_string(tm.tm_year + 1900); break;
      case 'm': out += fmt::format("{:02}", tm.tm_mon + 1); break;
      case 'd': out += fmt::format("{:02}", tm.tm_mday); break;
      case 'b': out += std::string(kMonths[tm.tm_mon]).substr(0, 3); break;
      case 'B': out += kMonths[tm.tm_mon]; break;
      case 'H': out += fmt::format("{:02}", tm.tm_hour); break;
      case 'M': out += fmt::format("{:02}", tm.tm_min); break;
      case '%': out.push_back('%'); break;
      default: out.push_back('%'); continue;  // not a directive: kept as written
    }
    ++i;
  }
  return Value(std::move(out));
}

}  // namespace

bool is_global_name(std::string_view name) {
  for (std::string_view g : kGlobalNames) {
    if (g == name) return true;
  }
  return false;
}

void install_globals(Env& env) {
  env.set("true", Value(true));
  env.set("false", Value(false));
  env.set("none", Value::none());
  env.set("True", Value(true));
  env.set("False", Value(false));
  env.set("None", Value::none());
  env.set("namespace", Value::callable("namespace", make_namespace));
  env.set("raise_exception", Value::callable("raise_exception", raise_exception));
  env.set("range", Value::callable("range", range));
  env.set("strftime_now", Value::callable("strftime_now", strftime_now));
}

}  // namespace tandem::text::jinja
