// Writes common/text/jinja/construct_cases.cpp: one template per construct
// with the text @huggingface/jinja renders for it (or, for error cases, the
// part of our error message that must appear; the reference must fail too).
// To add a case, add it below and run
//
//   TANDEM_NPM_MODULES=<node_modules> node tests/npm/jinja_construct_cases.mjs \
//       common/text/jinja/construct_cases.cpp
//
// The parity test re-renders every case with the reference, so the table
// cannot drift from it. A case: [name, template, context, errorSubstring?];
// context holds messages/tools/add_generation_prompt/bos_token/eos_token and
// `extra` (other variables).
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const modules = process.env.TANDEM_NPM_MODULES;
if (!modules || !process.argv[2]) {
  console.error("usage: TANDEM_NPM_MODULES=<node_modules> node jinja_construct_cases.mjs OUTPUT.cpp");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(modules), "noop.js"));
const { Template } = require("@huggingface/jinja");

const obj = { b: [1, 2.5, "é\n\"\t\u0001😀", null, true], a: { x: {} }, e: [] };
const msgs = [{ role: "system", content: "s" }, { role: "user", content: "u" }, { role: "assistant", content: "a", tool_calls: [1] }];
const cases = [
  ["ws_trim_blocks", "{% if true %}\nA\n{% endif %}\nB", {}],
  ["ws_lstrip_blocks", "  {% if true %}x{% endif %}\n  {{ 'y' }}\n\t{# c #}z", {}],
  ["ws_minus_statements", "a  {%- if true -%}  b  {%- endif -%}  c", {}],
  ["ws_minus_expressions", "a \n {{- 'x' -}} \n b", {}],
  ["ws_comments", "a {#- c -#} b{# keep #}\nc", {}],
  ["ws_trailing_newline", "x\n", {}],
  ["ws_generation_markers", "A {% generation %}gen{% endgeneration %} B|{%- generation -%}  x  {%- endgeneration -%}|", {}],
  ["ws_unicode_space", "a\u3000\u00a0{%- if true %}b{% endif %}", {}],
  ["ws_crlf", "{% if true %}\r\nA{% endif %}\r\n", {}],
  ["numbers", "{{ 1 }} {{ 1.0 }} {{ -0.0 }} {{ 1.5 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 10 / 5 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ 3 * 1.0 }}", {}],
  ["number_formats", "{{ 10.0 ** 21 }} {{ 1 / 3 }} {{ 2 ** 0.5 }} {{ 1000000.0 * 1000000.0 * 1000000000.0 }} {{ 0.000001 }} {{ 0.0000001 }} {{ 123456789.125 }}", {}],
  ["input_numbers", "{{ i }} {{ f }} {{ g }} {{ g is integer }} {{ big }} {{ neg }} {{ 'x' ~ f ~ g }} {{ [f, g] }}", { extra: { i: 3, f: 2.5, g: 2.0, big: 9007199254740993, neg: -0.5 } }],
  ["booleans_and_none", "{{ true }} {{ false }} {{ True }} {{ False }} [{{ none }}] [{{ None }}] [{{ undefined_var }}]", {}],
  ["containers", "{{ [1, 'a', none, true, 1.5, 2.0] }} {{ {'a': 1, 'b': [2]} }} {{ [] }} {{ {} }} {{ [undefined_var] }}", {}],
  ["string_literals", "{{ 'a\\nb\\t\\'q\\'' }} {{ \"d\\\"q\" }} {{ '\\u00e9\\x41\\ud83d\\ude00' }} {{ 'ab' 'cd' }} {{ '{{ not }}' }}", {}],
  ["concatenation", "{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ 1.0 ~ true }} {{ 'n=' + 5 }} {{ 'x' + [1, 2] }} {{ 'x' + {'a': 1} }} {{ [1] + [2, 3] }} {{ 2 ~ 'b' }} {{ 'f' + 2.5 }}", {}],
  ["comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 1 == 1.0 }} {{ '1' == 1 }} {{ 'a' != 'b' }} {{ none == none }} {{ x == none }} {{ [1] == [1] }} {{ true == 1 }} {{ 1.5 > 1 }} {{ '' == 0 }}", {}],
  ["membership", "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 1 in [1, 2] }} {{ 1.0 in [1] }} {{ '1' in [1] }} {{ 'k' in {'k': 1} }} {{ 'k' in undefined_var }} {{ 'q' not in {'k': 1} }} {{ 'k' not in undefined_var }}", {}],
  ["logic", "{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not [] }} {{ [] or {} }} {{ none or 0 }}|{{ 'a' if false }}|{{ 'a' if 0 else 'b' }} {{ 'n' if none is none else 'm' }} {{ 'p' if 1 else 'q' if 2 else 'r' }}", {}],
  ["precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ not 1 == 2 }} {{ [1,2,3] | length - 1 }} {{ 'ab' ~ 'cd' | upper }} {{ 1 < 2 == true }}", {}],
  ["unary", "{{ -x }} {{ +x }} {{ -(1.5) }} {{ - true }} {{ not x }}", { extra: { x: 3 } }],
  ["member_access", "{{ m.role }} {{ m['content'] }} {{ m.list[0] }} {{ m.list[-1] }} {{ m.list.1 }} {{ m.missing is defined }} {{ m.n is none }} {{ m.list | length }} {{ m.list.length }} {{ m.content.length }} [{{ m.missing.deeper }}] [{{ m.list[10] }}] [{{ none.attr }}]", { extra: { m: { role: "user", content: "Hi", n: null, list: [1, 2, 3] } } }],
  ["slices", "{{ [1,2,3,4,5][1:3] }} {{ [1,2,3,4,5][::-1] }} {{ [1,2,3,4,5][::2] }} {{ [1,2,3,4,5][-2:] }} {{ [1,2,3,4,5][:-2] }} {{ 'héllo'[1:4] }} {{ 'abc'[::-1] }} {{ [1,2,3][5:] }} {{ [1,2,3][3:0:-1] }} {{ [1,2,3][::0] }} {{ messages[::-1] | map(attribute='role') | join(',') }}", { messages: [{ role: "a" }, { role: "b" }] }],
  ["string_index", "{{ 'héllo'[1] }}{{ 'abc'[-1] }}[{{ 'abc'[10] }}]", {}],
  ["if_elif_else", "{% for x in [1,2,3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", {}],
  ["loop_variables", "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", {}],
  ["loop_else_and_filter", "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.index }}{{ loop.length }}{% endfor %}", {}],
  ["loop_over_dicts", "{% for k in {'b':1,'a':2} %}{{ k }}{% endfor %} {% for k, v in {'b':1,'a':2}.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d | items %}{{ k }}{{ v }}{% endfor %} {{ d }}", { extra: { d: { x: 1, "2": "two", "10": 3 } } }],
  ["break_continue", "{% for x in range(10) %}{% if x == 5 %}{% break %}{% endif %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}", {}],
  ["break_drops_partial_iteration", "{% for x in [1,2,3] %}a{{x}}{% if x == 2 %}{% break %}{% endif %}b{% endfor %}|{% for x in [1,2] %}c{% continue %}{% else %}E{% endfor %}", {}],
  ["loop_scope", "{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}],
  ["nested_loops", "{% for a in [1,2] %}{% for b in ['x','y'] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", {}],
  ["namespace", "{% set ns = namespace(count=0, found=false) %}{% for i in [1,2,3] %}{% set ns.count = ns.count + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns }} {{ ns.missing is defined }}", {}],
  ["namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}],
  ["set_tuple_and_block", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}X{{ a }}Y{% endset %}[{{ blk }}]", {}],
  ["macro_defaults", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }} {{ greet(name='Cy') }} {{ greet() }}", {}],
  ["macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}", {}],
  ["macro_sees_caller_scope", "{% macro show() %}{{ who }}{% endmacro %}{% set who = 'outer' %}{{ show() }}{% for who in ['loop'] %}{{ show() }}{% endfor %}", {}],
  ["macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(5) }}", {}],
  ["call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}", {}],
  ["call_block_arguments", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1,2]) %}[{{ x }}]{% endcall %}", {}],
  ["filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}|{% filter indent(2) %}a\nb{% endfilter %}", {}],
  ["string_filters", "{{ ' Hi There '|trim }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello wORLD x_y'|title }}|{{ 'hELLO'|capitalize }}|{{ 'héllo'|length }}|{{ '😀'|length }}|{{ 'abc'|string }}|{{ 'é'|capitalize }}", {}],
  ["tojson", "{{ obj|tojson }}\n{{ obj|tojson(indent=2) }}\n{{ obj|tojson(ensure_ascii=true) }}\n{{ obj|tojson(separators=(',', ':')) }}\n{{ obj|tojson(sort_keys=true) }}\n{{ 'x<>&\\'/'|tojson }}\n{{ none|tojson }}|{{ undefined_var|tojson }}|{{ 1.0|tojson }}|{{ 1.5|tojson }}|{{ [1, [2, {'k': []}]]|tojson(indent=4) }}|{{ obj|tojson(indent=0) }}", { extra: { obj } }],
  ["tojson_sort_keys", "{{ d|tojson(sort_keys=true) }}", { extra: { d: { b: 1, "-x": 2, "a b": 3, a: 4, Z9: 5, z10: 6, "é": 7, e: 8, f: 9, _y: 10, "1": 11, "ß": 12, ss: 13, "É": 14, E: 15, "æ": 16, ae: 17 } } }],
  ["join", "{{ [1, 'a', none, true, 1.0, 2.5]|join }}|{{ ['a','b']|join(', ') }}|{{ 'abc'|join('-') }}|{{ [[1,2],[3]]|join(';') }}|{{ [{'a': 1}]|join }}", {}],
  ["default", "{{ undefined_var|default('d') }}|{{ none|default('d') }}|{{ ''|default('e', true) }}|{{ 0|default(5, boolean=true) }}|{{ 'v'|default('x') }}", {}],
  ["list_filters", "{{ [3,1,2]|length }} {{ [3,1,2]|first }} {{ [3,1,2]|last }} {{ [3,1,2]|reverse }} {{ [3,1,2]|sort }} {{ ['b','A','a']|sort }} {{ [1,2,1,'1',1.0]|unique }} {{ [1]|list }} {{ {'a':1}|length }} {{ (1,2)|list|length }}{% set f = []|first %} {{ f is defined }}", {}],
  ["sort_arguments", "{{ [{'n':2},{'n':1}]|sort(attribute='n') }} {{ [3,1,2]|sort(reverse=true) }} {{ ['b','A','a']|sort(case_sensitive=true) }} {{ [[2,'b'],[1,'a']]|sort(attribute=0) }}", {}],
  ["map_selectattr_rejectattr", "{{ msgs|map(attribute='role')|join(',') }} {{ msgs|selectattr('role','equalto','user')|list|length }} {{ msgs|rejectattr('role','equalto','user')|map(attribute='content')|join }} {{ msgs|selectattr('tool_calls')|length }} {{ msgs|selectattr('tool_calls','defined')|length }} {{ msgs|rejectattr('tool_calls')|length }} {{ msgs|map(attribute='missing', default='-')|join }}", { extra: { msgs } }],
  ["dict_filters_and_methods", "{{ d|items }} {{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }} {{ d.keys() }} {{ d.values() }} {{ d.get('a') }} [{{ d.get('zz') }}] {{ d.get('zz', 'dflt') }} {{ d.items() | length }}", { extra: { d: { b: 2, a: 3, c: 1 } } }],
  ["numeric_filters", "{{ -3|abs }} {{ (-2.5)|abs }} {{ 3.7|int }} {{ 3.7|int() }} {{ '42'|int }} {{ '4.5x'|float }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3|float }} {{ 2.5|string }} {{ 3|string }} {{ 2.0|string }} {{ true|int }} {{ true|string }} {{ '  12abc'|int }} {{ '-3.5e2'|float }}", {}],
  ["replace_and_indent", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'aaa'.replace('a', 'c', count=1) }} {{ 'ab'|replace('', '-') }}|{{ 'l1\nl2\n\nl4'|indent }}|{{ 'l1\nl2\n\nl4'|indent(2, true, true) }}|{{ 'l1\nl2'|indent(width=3, first=true) }}", {}],
  ["safe_and_string", "{{ '<b>'|safe }} {{ [1,'a']|string }} {{ [1, [2]]|string }}", {}],
  ["filters_on_expressions", "{{ (messages|length - 1) ~ '' }} {{ ('a' ~ 'b')|upper }} {{ messages[0].content|trim|upper }}", { messages: [{ role: "user", content: "  hi  " }] }],
  ["tests", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ x is none }} {{ 's' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 's' is iterable }} {{ {} is iterable }} {{ (1,2) is iterable }} {{ [] is sequence }} {{ 1 is number }} {{ 1.5 is number }} {{ 1.5 is integer }} {{ 2 is even }} {{ 3 is odd }} {{ true is boolean }} {{ true is true }} {{ false is false }} {{ 1 is true }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ range is callable }} {{ x is not none }} {{ x is not defined }}", { extra: { x: 1 } }],
  ["string_methods", "{{ ' a b '.strip() }}|{{ '\\n \\nx\\n'.lstrip('\\n') }}|{{ 'x  \\n'.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ ' a b c '.split(none, 1) }}|{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'Hello World'.upper() }} {{ 'Hello World'.lower() }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }} {{ 'a-b'.replace('-', '+') }} {{ 'xy'.strip('x') }}", {}],
  ["think_split", "{% set c = '<think>\\nR\\n</think>\\n\\n  Answer' %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|{{ '</think>' in c }}", {}],
  ["unicode_case", "{{ 'straße'|upper }} {{ 'ΟΔΥΣΣΕΥΣ'|lower }} {{ 'İ'|lower|length }} {{ 'ǆ'|upper }} {{ 'привет'|upper }} {{ 'ﬁ'|upper }} {{ 'ÀÉÎ'|lower }} {{ 'ĳ'|upper }}", {}],
  ["range", "{{ range(3) }} {{ range(1, 4) }} {{ range(5, 0, -2) }} {{ range(0) }} {{ range(3)|length }}", {}],
  ["strftime_now", "{{ strftime_now('%Y-%m-%d')|length }} {{ strftime_now('%%') }} {{ strftime_now('%Q') }} {{ strftime_now('%B')|length > 2 }}", {}],
  ["generation_prompt_variables", "{{ add_generation_prompt }} {{ bos_token }} {{ eos_token }} {{ tools }} {{ tools is none }} {{ messages|length }}", { add_generation_prompt: true, bos_token: "<s>", eos_token: "</s>" }],
  // The Mistral-7B-Instruct-v0.1 template shape (role alternation enforced with raise_exception).
  ["mistral_instruct_style", "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}", { messages: [{ role: "user", content: "Hello" }, { role: "assistant", content: "Hi!" }, { role: "user", content: "Bye" }], bos_token: "<s>", eos_token: "</s>" }],
  ["error_mistral_instruct_style_roles", "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}", { messages: [{ role: "system", content: "S" }, { role: "user", content: "Hello" }], bos_token: "<s>", eos_token: "</s>" }, "line 1 col 110: Conversation roles must alternate user/assistant/user/assistant/..."],
  // Errors: @huggingface/jinja fails too; ours must name the construct.
  ["error_raise_exception", "{% if true %}{{ raise_exception('Bad role: ' + 'x') }}{% endif %}", {}, "line 1 col 17: Bad role: x"],
  ["error_unsupported_filter", "x\n{{ 'a b'|wordcount }}", {}, "line 2 col 10: unsupported filter 'wordcount'"],
  ["error_unsupported_test", "{{ 3 is divisibleby }}", {}, "unsupported test 'divisibleby'"],
  ["error_unsupported_statement", "{% include 'x' %}", {}, "line 1 col 1: unsupported statement 'include'"],
  ["error_print_tuple", "{{ (1, 2) }}", {}, "cannot convert a tuple to JSON"],
  ["error_concat_none", "{{ 'a' ~ none }}", {}, "cannot apply '~' to none"],
  ["error_compare_strings", "{{ 'a' < 'b' }}", {}, "unsupported operator '<' between string and string"],
  ["error_iterate_string", "{% for c in 'ab' %}{{ c }}{% endfor %}", {}, "cannot iterate over string"],
  ["error_unknown_function", "{{ dict(a=1) }}", {}, "unknown function 'dict'"],
  ["error_unclosed_block", "{% if true %}x", {}, "is not closed by '{% endif %}'"],
  ["error_unsupported_method", "{{ [1].append(2) }}", {}, "unsupported method 'append' on list"],
  ["error_default_without_parentheses", "{{ 'x'|default }}", {}, "filter 'default' cannot be applied to string"],
  ["error_first_with_parentheses", "{{ [1]|first() }}", {}, "filter 'first' with arguments cannot be applied to list"],
  ["error_unpack_tuple_in_loop", "{% for a, b in [(1, 2)] %}{% endfor %}", {}, "cannot unpack a tuple"],
  ["error_content_none", "{{ '</think>' in messages[0].content }}", { messages: [{ role: "assistant", content: null }] }, "cannot apply 'in' to none"],
  ["error_syntax", "{{ 1 + }}", {}, "line 1 col 8: unexpected '}}' in an expression"],
  ["error_bad_escape", "{{ 'a\\qb' }}", {}, "unsupported escape sequence '\\q'"],
  ["error_string_of_dict", "{{ {'k': 1}|string }}", {}, "filter 'string' cannot be applied to dict"],
  ["error_integer_division_by_zero_string", "{{ 'a' * 2 }}", {}, "unsupported operator '*' between string and integer"],
];

// C++ string literal of s, byte for byte (UTF-8 kept, control bytes octal).
function cq(s) {
  let out = '"';
  for (const ch of Buffer.from(s, "utf8")) {
    if (ch === 0x5c) out += "\\\\";
    else if (ch === 0x22) out += '\\"';
    else if (ch === 0x0a) out += "\\n";
    else if (ch === 0x09) out += "\\t";
    else if (ch === 0x0d) out += "\\r";
    else if (ch === 0x3f) out += "\\?"; // no trigraphs
    else if (ch < 0x20 || ch === 0x7f) out += "\\" + ch.toString(8).padStart(3, "0");
    else out += String.fromCharCode(ch); // one char per byte; the file is written as latin1, so bytes pass unchanged
  }
  return out + '"';
}
const lines = [];
let bad = 0;
for (const [name, tmpl, ctx, err] of cases) {
  const vars = { messages: ctx.messages ?? [], tools: ctx.tools ?? null, add_generation_prompt: ctx.add_generation_prompt ?? false, bos_token: ctx.bos_token ?? "", eos_token: ctx.eos_token ?? "", ...(ctx.extra ?? {}) };
  let ok, text;
  try { text = new Template(tmpl).render(vars); ok = true; } catch (e) { ok = false; text = String(e.message); }
  if (err !== undefined && ok) { console.error("EXPECTED ERROR but ok:", name, JSON.stringify(text)); bad++; }
  if (err === undefined && !ok) { console.error("UNEXPECTED ERROR:", name, text); bad++; }
  const ctxJson = JSON.stringify(ctx);
  lines.push(`    {${cq(name)},\n     ${cq(tmpl)},\n     ${cq(ctxJson)},\n     ${ok}, ${cq(ok ? text : (err ?? ""))}},`);
  if (process.env.SHOW) console.log(name, ok ? "=>" : "ERR", JSON.stringify(text));
}
if (bad) process.exit(1);
const body = `// Generated by tests/npm/jinja_construct_cases.mjs from @huggingface/jinja
// 0.5.11: every expected text below is what it rendered for the case (see
// construct_cases.h). Error cases: it failed too, and the text is what our
// message must contain. Edit the script, not this file.
#include "common/text/jinja/construct_cases.h"

namespace tandem::text::jinja {

const std::vector<ConstructCase>& construct_cases() {
  static const std::vector<ConstructCase> cases = {
${lines.join("\n")}
  };
  return cases;
}

}  // namespace tandem::text::jinja
`;
fs.writeFileSync(process.argv[2], Buffer.from(body, "latin1"));
console.log("cases:", cases.length);
