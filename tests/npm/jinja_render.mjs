// Renders chat templates with @huggingface/jinja, the reference the C++
// template engine (common/text/jinja) is compared against.
//
//   TANDEM_NPM_MODULES=<node_modules> node jinja_render.mjs cases.json
//
// cases.json: {"template": "...", "cases": [{"messages": [...], "tools": [...] or null,
//   "add_generation_prompt": bool, "bos_token": "...", "eos_token": "...",
//   "extra": {...other variables...}, "template": "...optional per-case template..."}]}
// Prints one JSON array with, per case, {"ok": true, "text": "..."} or
// {"ok": false, "error": "..."}; the variables are passed as transformers.js
// passes them to Template.render (tools null when absent).
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const modules = process.env.TANDEM_NPM_MODULES;
if (!modules) {
  console.error("jinja_render.mjs: set TANDEM_NPM_MODULES to the node_modules folder with @huggingface/jinja");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(modules), "noop.js"));
const { Template } = require("@huggingface/jinja");

const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const compiled = new Map();
function template(source) {
  if (!compiled.has(source)) {
    try {
      compiled.set(source, { template: new Template(source) });
    } catch (e) {
      compiled.set(source, { error: String(e && e.message) });
    }
  }
  return compiled.get(source);
}

const results = input.cases.map((c) => {
  const t = template(c.template ?? input.template);
  if (t.error !== undefined) return { ok: false, error: t.error };
  try {
    const text = t.template.render({
      messages: c.messages ?? [],
      tools: c.tools ?? null,
      add_generation_prompt: c.add_generation_prompt ?? false,
      bos_token: c.bos_token ?? "",
      eos_token: c.eos_token ?? "",
      ...(c.extra ?? {}),
    });
    if (typeof text !== "string") return { ok: false, error: `render returned ${typeof text}` };
    return { ok: true, text };
  } catch (e) {
    return { ok: false, error: String(e && e.message) };
  }
});
process.stdout.write(JSON.stringify(results));
