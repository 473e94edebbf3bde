// One template per construct (whitespace control, literals, operators,
// statements, filters, tests, methods, globals, errors) with the text
// @huggingface/jinja renders for it. The unit test checks our rendering
// against `expected`; the parity test also re-renders every case with
// @huggingface/jinja itself, so the table cannot drift from the reference.
#pragma once

#include <vector>

namespace tandem::text::jinja {

struct ConstructCase {
  const char* name;
  const char* source;   // the template
  const char* context;  // JSON: messages, tools, add_generation_prompt, bos_token, eos_token, extra
  bool ok;              // false: the reference fails too
  const char* expected; // ok: the rendering; else a part of our error message
};

const std::vector<ConstructCase>& construct_cases();

}  // namespace tandem::text::jinja
