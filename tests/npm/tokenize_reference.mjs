// Reference tokenisation with Hugging Face's JavaScript implementation.
// usage: node tokenize_reference.mjs NODE_MODULES TOKENIZER_DIR CORPUS.json
// Prints one JSON array: per corpus entry {ids, ids_plain, decoded}, where
// ids = encode(text), ids_plain = encode(text, {add_special_tokens: false}),
// decoded = decode(ids), decoded_plain = decode(ids_plain) without clean-up
// ("" for no ids). Entries {"hex": ...} are bytes that
// are decoded as TextDecoder does (bad sequences -> U+FFFD) before encoding.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [modules, dir, corpusPath] = process.argv.slice(2);
const entry = path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(entry).href);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const tc = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(tj, tc);
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
const out = corpus.map((e) => {
  const text = typeof e === "string" ? e : new TextDecoder("utf-8").decode(Buffer.from(e.hex, "hex"));
  const ids = tok.encode(text).ids;
  const ids_plain = tok.encode(text, { add_special_tokens: false }).ids;
  const decoded = ids.length ? tok.decode(ids) : "";
  const decoded_plain = ids_plain.length
    ? tok.decode(ids_plain, { clean_up_tokenization_spaces: false })
    : "";
  return { ids, ids_plain, decoded, decoded_plain };
});
process.stdout.write(JSON.stringify(out));
