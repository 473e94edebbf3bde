#include "common/text/jinja/interpreter.h"

#include <algorithm>
#include <unordered_set>

#include "common/text/jinja/builtins.h"
#include "common/text/jinja/unicode.h"

namespace tandem::text::jinja {
namespace {

// Whether `name` is read anywhere in the statements or expressions (for the
// implicit varargs / kwargs of macros).
bool reads(const Expr* e, std::string_view name);

bool reads(const std::vector<Arg>& args, std::string_view name) {
  for (const Arg& a : args) {
    if (reads(a.value.get(), name)) return true;
  }
  return false;
}

bool reads(const Expr* e, std::string_view name) {
  if (!e) return false;
  if (e->kind == ExprKind::kIdentifier && e->name == name) return true;
  for (const ExprPtr& item : e->items) {
    if (reads(item.get(), name)) return true;
  }
  return reads(e->args, name);
}

bool reads(const std::vector<Stmt>& body, std::string_view name) {
  for (const Stmt& s : body) {
    if (reads(s.expr.get(), name) || reads(s.target.get(), name) || reads(s.condition.get(), name) ||
        reads(s.params, name) || reads(s.body, name) || reads(s.alternate, name)) {
      return true;
    }
  }
  return false;
}

Interpreter::MacroSignature signature(std::string display, const Stmt& s) {
  Interpreter::MacroSignature sig{std::move(display), &s.params, false, false};
  auto declared = [&](std::string_view n) {
    return std::any_of(s.params.begin(), s.params.end(), [&](const Arg& a) { return a.name == n; });
  };
  sig.varargs = !declared("varargs") && (reads(s.body, "varargs") || reads(s.params, "varargs"));
  sig.kwargs = !declared("kwargs") && (reads(s.body, "kwargs") || reads(s.params, "kwargs"));
  return sig;
}

struct DepthGuard {
  int& depth;
  explicit DepthGuard(int& d) : depth(d) { ++depth; }
  ~DepthGuard() { --depth; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

// Sets a counter to a value for a scope (loop depth inside macros and blocks).
struct SetForScope {
  int& target;
  int saved;
  SetForScope(int& t, int value) : target(t), saved(t) { target = value; }
  ~SetForScope() { target = saved; }
  SetForScope(const SetForScope&) = delete;
  SetForScope& operator=(const SetForScope&) = delete;
};

}  // namespace

const Value* Env::lookup(const std::string& name) const {
  for (const Env* e = this; e != nullptr; e = e->parent.get()) {
    auto it = e->vars.find(name);
    if (it != e->vars.end()) return &it->second;
  }
  return nullptr;
}

std::string Interpreter::render(const std::vector<Stmt>& program, const EnvPtr& globals) {
  struct Cleanup {
    std::vector<Value>& namespaces;
    ~Cleanup() {
      for (const Value& ns : namespaces) ns.mutable_namespace().clear();
      namespaces.clear();
    }
  } cleanup{namespaces_};
  stack_base_ = static_cast<const char*>(__builtin_frame_address(0));
  std::string out;
  exec_block(program, globals, out);
  return out;
}

void Interpreter::check_stack() const {
  const auto* here = static_cast<const char*>(__builtin_frame_address(0));
  // The stack grows down on every platform this builds for.
  if (stack_base_ != nullptr && here < stack_base_ &&
      static_cast<size_t>(stack_base_ - here) > limits_.max_stack_bytes) {
    eval_fail("template nests too deeply (more than {} KiB of stack)", limits_.max_stack_bytes >> 10);
  }
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) eval_fail("output larger than {} bytes", limits_.max_output_bytes);
}

void Interpreter::step() {
  if (++steps_ > limits_.max_steps) eval_fail("more than {} loop iterations and calls", limits_.max_steps);
}

void Interpreter::charge(size_t n) {
  steps_ += n / 64;
  step();
}

void Interpreter::append(std::string& out, std::string_view text) const {
  out += text;
  check_size(out.size());
}

void Interpreter::append_value(std::string& out, const Value& v) const {
  if (v.is_undefined() || v.is_none()) return;
  if (v.is_string()) {
    append(out, v.as_string());
  } else {
    append(out, to_output(v, limits_.max_output_bytes));
  }
}

std::string Interpreter::render_block(const std::vector<Stmt>& body, const EnvPtr& env) {
  SetForScope no_loop(loop_depth_, 0);
  std::string out;
  exec_block(body, env, out);
  return out;
}

Interpreter::Flow Interpreter::exec_block(const std::vector<Stmt>& body, const EnvPtr& env, std::string& out) {
  for (const Stmt& s : body) {
    const Flow f = exec(s, env, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const EnvPtr& env, std::string& out) {
  try {
    check_stack();
    return exec_statement(s, env, out);
  } catch (const EvalError& e) {
    source_.fail_at(s.offset, e.kind, e.message);
  }
}

Interpreter::Flow Interpreter::exec_statement(const Stmt& s, const EnvPtr& env, std::string& out) {
  switch (s.kind) {
    case StmtKind::kText: append(out, s.text); return Flow::kNormal;
    case StmtKind::kOutput: {
      const Value v = eval(*s.expr, env);
      try {
        append_value(out, v);
      } catch (const EvalError& e) {
        source_.fail_at(s.expr->offset, e.kind, e.message);
      }
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      return exec_block(truthy(eval(*s.expr, env)) ? s.body : s.alternate, env, out);
    case StmtKind::kFor: return exec_for(s, env, out);
    case StmtKind::kSet: exec_set(s, env); return Flow::kNormal;
    case StmtKind::kMacro: define_macro(s, env); return Flow::kNormal;
    case StmtKind::kCallBlock: exec_call_block(s, env, out); return Flow::kNormal;
    case StmtKind::kFilterBlock: {
      const Value body(render_block(s.body, env));
      Value result;
      try {
        result = apply_filter(*this, body, *s.expr, env);
      } catch (const EvalError& e) {
        source_.fail_at(s.expr->offset, e.kind, e.message);
      }
      append_value(out, result);
      return Flow::kNormal;
    }
    case StmtKind::kBreak:
    case StmtKind::kContinue:
      if (loop_depth_ == 0) {
        source_.fail_at(s.offset, ErrorKind::kUnsupported,
                        s.kind == StmtKind::kBreak ? "'break' outside a loop" : "'continue' outside a loop");
      }
      return s.kind == StmtKind::kBreak ? Flow::kBreak : Flow::kContinue;
    case StmtKind::kComment: return Flow::kNormal;
  }
  return Flow::kNormal;
}

namespace {

// Assigns a loop item to the loop variable(s).
void assign_loop_target(const Expr& target, const Value& item, Env& scope) {
  if (target.kind == ExprKind::kIdentifier) {
    scope.set(target.name, item);
    return;
  }
  if (!item.is_list() || item.is_tuple()) eval_fail("cannot unpack a {} into loop variables", type_name(item));
  if (item.items().size() != target.items.size()) {
    eval_fail("too {} items to unpack ({} into {})", item.items().size() < target.items.size() ? "few" : "many",
              item.items().size(), target.items.size());
  }
  for (size_t j = 0; j < target.items.size(); ++j) {
    if (target.items[j]->kind != ExprKind::kIdentifier) eval_fail("loop variables must be names");
    scope.set(target.items[j]->name, item.items()[j]);
  }
}

}  // namespace

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const EnvPtr& env, std::string& out) {
  auto scope = std::make_shared<Env>(env);
  Value iterable = eval(*s.expr, scope);
  if (iterable.is_dict()) iterable = dict_view(iterable, "keys");
  if (!iterable.is_list()) {
    source_.fail_at(s.expr->offset, ErrorKind::kInvalidInput,
                    fmt::format("cannot iterate over {}", type_name(iterable)));
  }
  std::vector<Value> items;
  for (const Value& item : iterable.items()) {
    try {
      if (s.condition) {
        auto test_scope = std::make_shared<Env>(scope);
        assign_loop_target(*s.target, item, *test_scope);
        if (!truthy(eval(*s.condition, test_scope))) continue;
      } else if (s.target->kind == ExprKind::kTuple) {
        Env probe(nullptr);
        assign_loop_target(*s.target, item, probe);
      }
    } catch (const EvalError& e) {
      source_.fail_at(s.target->offset, e.kind, e.message);
    }
    items.push_back(item);
  }
  bool none_completed = true;
  {
    DepthGuard in_loop(loop_depth_);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step();
      const auto idx = static_cast<size_t>(i);
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("previtem", i > 0 ? items[idx - 1] : Value());
      loop.set("nextitem", i < n - 1 ? items[idx + 1] : Value());
      scope->set("loop", Value::dict(std::move(loop)));
      assign_loop_target(*s.target, items[idx], *scope);
      // What an iteration rendered is dropped when it ends in break/continue.
      std::string iteration;
      const Flow f = exec_block(s.body, scope, iteration);
      if (f == Flow::kContinue) continue;
      if (f == Flow::kBreak) break;
      append(out, iteration);
      none_completed = false;
    }
  }
  if (none_completed) return exec_block(s.alternate, scope, out);
  return Flow::kNormal;
}

void Interpreter::exec_set(const Stmt& s, const EnvPtr& env) {
  const Value rhs = s.expr ? eval(*s.expr, env) : Value(render_block(s.body, env));
  const Expr& target = *s.target;
  switch (target.kind) {
    case ExprKind::kIdentifier: env->set(target.name, rhs); return;
    case ExprKind::kTuple: {
      if (!rhs.is_list()) eval_fail("cannot unpack a {} in set", type_name(rhs));
      if (rhs.items().size() != target.items.size()) {
        eval_fail("too {} items to unpack in set", target.items.size() > rhs.items().size() ? "few" : "many");
      }
      for (size_t i = 0; i < target.items.size(); ++i) {
        if (target.items[i]->kind != ExprKind::kIdentifier) eval_fail("set can only unpack into names");
        env->set(target.items[i]->name, rhs.items()[i]);
      }
      return;
    }
    case ExprKind::kMember: {
      const Value object = eval(*target.items[0], env);
      const Expr& key = *target.items[1];
      if (!object.is_namespace()) eval_fail("cannot assign an attribute of a {} (only of a namespace)", type_name(object));
      if (target.flag || key.kind != ExprKind::kLiteral || !key.literal.is_string()) {
        eval_fail("a namespace attribute is assigned with ns.name = ...");
      }
      object.mutable_namespace().set(key.literal.as_string(), rhs);
      return;
    }
    default: eval_fail("cannot assign to this expression");
  }
}

void Interpreter::bind_parameters(const MacroSignature& sig, CallArgs& args, const EnvPtr& scope) {
  const std::vector<Arg>& params = *sig.params;
  std::unordered_set<std::string> taken;
  std::vector<const Arg*> pending;
  for (size_t i = 0; i < params.size(); ++i) {
    const Arg& p = params[i];
    const Value* given = nullptr;
    if (i < args.positional.size()) {
      given = &args.positional[i];
    } else if (const Value* kw = args.keyword.find(p.name)) {
      given = kw;
      taken.insert(p.name);
    }
    if (!given && p.value) pending.push_back(&p);
    scope->set(p.name, given ? *given : Value());
  }
  Dict rest;
  for (const auto& [k, v] : args.keyword.entries()) {
    if (!taken.count(k)) rest.set(k, v);
  }
  if (sig.kwargs) {
    scope->set("kwargs", Value::dict(std::move(rest)));
  } else if (!rest.empty()) {
    eval_fail("macro {} takes no keyword argument '{}'", sig.display, rest.entries().front().first);
  }
  if (sig.varargs) {
    std::vector<Value> extra;
    for (size_t i = params.size(); i < args.positional.size(); ++i) extra.push_back(args.positional[i]);
    scope->set("varargs", Value::list(std::move(extra)));
  } else if (args.positional.size() > params.size()) {
    eval_fail("macro {} takes not more than {} argument(s)", sig.display, params.size());
  }
  for (const Arg* p : pending) scope->set(p->name, eval(*p->value, scope));
}

void Interpreter::define_macro(const Stmt& s, const EnvPtr& env) {
  auto sig = std::make_shared<const MacroSignature>(signature("'" + s.text + "'", s));
  const Stmt* macro = &s;
  env->set(s.text, Value::callable(s.text, [sig, macro](Invocation& inv) {
             auto scope = std::make_shared<Env>(inv.env);
             inv.interpreter.bind_parameters(*sig, inv.args, scope);
             return Value(inv.interpreter.render_block(macro->body, scope));
           }));
}

void Interpreter::exec_call_block(const Stmt& s, const EnvPtr& env, std::string& out) {
  auto sig = std::make_shared<const MacroSignature>(signature("caller", s));
  const Stmt* block = &s;
  Value caller = Value::callable("caller", [sig, block, env](Invocation& inv) {
    auto scope = std::make_shared<Env>(env);
    inv.interpreter.bind_parameters(*sig, inv.args, scope);
    return Value(inv.interpreter.render_block(block->body, scope));
  });
  const Expr& call_expr = *s.expr;
  CallArgs args = eval_args(call_expr.args, env);
  const Value fn = eval(*call_expr.items[0], env);
  auto call_env = std::make_shared<Env>(env);
  call_env->set("caller", std::move(caller));
  Value result;
  try {
    if (!fn.is_callable()) eval_unsupported("unknown macro '{}'", call_expr.items[0]->name);
    result = call(fn, std::move(args), call_env);
  } catch (const EvalError& e) {
    source_.fail_at(call_expr.offset, e.kind, e.message);
  }
  append_value(out, result);
}

Value Interpreter::call(const Value& fn, CallArgs args, const EnvPtr& env) {
  step();
  DepthGuard depth(call_depth_);
  if (call_depth_ > limits_.max_call_depth) eval_fail("calls nested deeper than {}", limits_.max_call_depth);
  Invocation inv{std::move(args), *this, env};
  return fn.as_callable().fn(inv);
}

CallArgs Interpreter::eval_args(const std::vector<Arg>& args, const EnvPtr& env) {
  CallArgs out;
  for (const Arg& a : args) {
    if (a.kind == ArgKind::kPositional) {
      out.positional.push_back(eval(*a.value, env));
    } else if (a.kind == ArgKind::kSpread) {
      const Value v = eval(*a.value, env);
      if (!v.is_list()) eval_fail("cannot unpack a {} with '*'", type_name(v));
      out.positional.insert(out.positional.end(), v.items().begin(), v.items().end());
    }
  }
  auto add = [&](const std::string& key, Value v) {
    if (out.keyword.contains(key)) eval_fail("got multiple values for keyword argument '{}'", key);
    out.keyword.set(key, std::move(v));
  };
  for (const Arg& a : args) {
    if (a.kind == ArgKind::kKeyword) {
      add(a.name, eval(*a.value, env));
    } else if (a.kind == ArgKind::kKeywordSpread) {
      const Value v = eval(*a.value, env);
      if (!v.is_dict()) eval_fail("the argument after '**' must be a dict, not {}", type_name(v));
      for (const auto& [k, item] : v.as_dict().entries()) add(k, item);
    }
  }
  return out;
}

Value Interpreter::eval(const Expr& e, const EnvPtr& env) {
  try {
    check_stack();
    return eval_node(e, env);
  } catch (const EvalError& err) {
    source_.fail_at(e.offset, err.kind, err.message);
  }
}

}  // namespace tandem::text::jinja
