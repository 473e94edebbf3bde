// Renders a parsed template: scopes, statements and expressions, with
// @huggingface/jinja's semantics (see value.h for values, builtins.h for
// filters, tests, methods and globals):
//  - {% set %} assigns in the current scope; a for loop has its own scope
//    (assignments inside do not leave it), if blocks do not;
//  - macros see their caller's scope; defaults, *varargs and **kwargs as in
//    Jinja; call blocks pass `caller`;
//  - break/continue drop what the current iteration rendered so far, and a
//    loop whose every iteration ended early renders its else block.
// Failures are tandem::Error naming the template, line and column.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/text/jinja/ast.h"
#include "common/text/jinja/lexer.h"
#include "common/text/jinja/value.h"

namespace tandem::text::jinja {

// Bounds that stop runaway templates.
struct RenderLimits {
  size_t max_output_bytes = kDefaultMaxBytes;  // the rendering, and any one string built on the way
  int max_call_depth = 64;                     // nested macro calls
  uint64_t max_steps = 10'000'000;             // loop iterations and calls, together
  size_t max_list_size = 1'000'000;            // lists built by range() and +
  // Stack the renderer may use below its entry frame; deeper nesting (macro
  // recursion through nested blocks) fails instead of overflowing a thread's
  // stack. Templates from real models use a few KiB.
  size_t max_stack_bytes = size_t{256} << 10;
};

struct Env {
  explicit Env(std::shared_ptr<Env> parent_env) : parent(std::move(parent_env)) {}
  // The variable's value in this scope or an enclosing one; nullptr if none.
  const Value* lookup(const std::string& name) const;
  void set(const std::string& name, Value v) { vars[name] = std::move(v); }

  std::shared_ptr<Env> parent;
  std::unordered_map<std::string, Value> vars;
};
using EnvPtr = std::shared_ptr<Env>;

class Interpreter {
 public:
  Interpreter(const SourceInfo& source, const RenderLimits& limits) : source_(source), limits_(limits) {}

  std::string render(const std::vector<Stmt>& program, const EnvPtr& globals);

  Value eval(const Expr& e, const EnvPtr& env);
  CallArgs eval_args(const std::vector<Arg>& args, const EnvPtr& env);
  // Calls a callable value (a builtin, a method, a macro).
  Value call(const Value& fn, CallArgs args, const EnvPtr& env);
  // Renders statements into a fresh string (macro bodies, set blocks, ...).
  std::string render_block(const std::vector<Stmt>& body, const EnvPtr& env);

  const RenderLimits& limits() const { return limits_; }
  // Fails when a string grows past the output limit.
  void check_size(size_t bytes) const;
  // Counts one loop iteration or call against max_steps.
  void step();
  // Counts work proportional to n (scanning a list or a string) against
  // max_steps, one step per 64 items.
  void charge(size_t n);
  // Namespaces are emptied when rendering ends, which breaks any reference
  // cycle a template made through them ({% set ns.self = ns %}).
  void track_namespace(const Value& ns) { namespaces_.push_back(ns); }

  struct MacroSignature {
    std::string display;  // "'name'" for macros, "caller" for call blocks
    const std::vector<Arg>* params;
    bool varargs = false;  // the body reads varargs / kwargs
    bool kwargs = false;
  };
  // Binds a macro's (or caller's) parameters in scope, as Jinja does.
  void bind_parameters(const MacroSignature& sig, CallArgs& args, const EnvPtr& scope);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_block(const std::vector<Stmt>& body, const EnvPtr& env, std::string& out);
  Flow exec(const Stmt& s, const EnvPtr& env, std::string& out);
  Flow exec_statement(const Stmt& s, const EnvPtr& env, std::string& out);
  Flow exec_for(const Stmt& s, const EnvPtr& env, std::string& out);
  void exec_set(const Stmt& s, const EnvPtr& env);
  void define_macro(const Stmt& s, const EnvPtr& env);
  void exec_call_block(const Stmt& s, const EnvPtr& env, std::string& out);
  Value eval_node(const Expr& e, const EnvPtr& env);
  Value eval_slice(const Value& object, const Expr& slice, const EnvPtr& env);
  Value eval_member(const Expr& e, const EnvPtr& env);
  Value eval_call(const Expr& e, const EnvPtr& env);
  void append(std::string& out, std::string_view text) const;
  void append_value(std::string& out, const Value& v) const;

  const SourceInfo& source_;
  RenderLimits limits_;
  // Fails when the renderer's stack has grown past max_stack_bytes.
  void check_stack() const;

  const char* stack_base_ = nullptr;
  int call_depth_ = 0;
  int loop_depth_ = 0;  // loops that break/continue may leave (reset inside macros and blocks)
  uint64_t steps_ = 0;
  std::vector<Value> namespaces_;
};

}  // namespace tandem::text::jinja
