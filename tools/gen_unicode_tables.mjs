#!/usr/bin/env node
// Generates common/text/unicode_data.cpp: the Unicode tables behind
// common/text/unicode.h (general category, White_Space, Alphabetic, Lowercase,
// Uppercase, simple case folding, canonical combining classes, canonical and
// compatibility decompositions, canonical compositions).
//
//   node tools/gen_unicode_tables.mjs > common/text/unicode_data.cpp
//
// Everything is read from the running node (its ICU), not from UCD files,
// because the reference we must match is Hugging Face's JavaScript tokenizer
// on that node: its RegExp \p{..} and String.prototype.normalize define the
// truth. How each table is derived:
// - categories and binary properties: /^\p{gc=Lu}$/u-style tests per code point.
// - simple case folding: JS /iu compares Canonicalize(c) = scf(c). For every
//   code point that can change under case mapping or folding (\p{CWCF},
//   \p{CWCM}, \p{Cased}) we group the code points that /^[c]$/iu matches into
//   classes; every member folds to one representative. The representative is
//   the one member that does not change when case folded (\p{CWCF} false), else
//   the one that is its own lowercase, else the one that is its own
//   lowercase-of-uppercase; three Unicode 15 pairs where all members change
//   under full folding are listed in FOLD_TARGET_EXCEPTIONS (CaseFolding.txt).
//   Regex matching only needs "same class", which the classes give exactly.
// - decompositions: NFD and NFKD of each single code point (full, recursive,
//   already canonically ordered). Hangul syllables are left to the algorithm.
// - compositions: a primary composite is a code point c with NFD(c) != c and
//   NFC(c) == c. NFC builds c by composing its NFD left to right, so its last
//   step is the pair (NFC(all but the last of NFD(c)), last of NFD(c)).
// - canonical combining classes: node does not expose them, but NFD sorts
//   combining marks by class. A code point x (with NFD(x) == x) has a non-zero
//   class iff NFD(U+0301 x U+0334) moves U+0334 (class 1) before U+0301
//   (class 230): a class-0 x would block the reordering. Its value is found by
//   comparing x with one reference mark per known class value (x sorts after r
//   iff NFD(x r) == r x). The known values are the ones in use since Unicode 6;
//   the generator fails if a mark sorts between two of them (a new value).
//   Decomposable code points get the class of their first decomposed code
//   point when that is 0, and 230/0 for the handful listed below otherwise.
import process from "node:process";

const UNICODE = process.versions.unicode;
const MAX = 0x10ffff;
const CATEGORIES = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp",
  "Cc", "Cf", "Cs", "Co", "Cn"];
// Unicode 15 added three case-folding pairs whose members all change under
// full case folding and are all lowercase; JS cannot tell the target apart.
const FOLD_TARGET_EXCEPTIONS = new Map([[0x1fd3, 0x390], [0x1fe3, 0x3b0], [0xfb05, 0xfb06]]);
// One reference mark per canonical combining class value (UnicodeData.txt).
const CCC_REFERENCES = [
  [1, 0x334], [6, 0x16ff0], [7, 0x93c], [8, 0x3099], [9, 0x94d], [10, 0x5b0], [11, 0x5b1],
  [12, 0x5b2], [13, 0x5b3], [14, 0x5b4], [15, 0x5b5], [16, 0x5b6], [17, 0x5b7], [18, 0x5b8],
  [19, 0x5b9], [20, 0x5bb], [21, 0x5bc], [22, 0x5bd], [23, 0x5bf], [24, 0x5c1], [25, 0x5c2],
  [26, 0xfb1e], [27, 0x64b], [28, 0x64c], [29, 0x64d], [30, 0x618], [31, 0x619], [32, 0x61a],
  [33, 0x651], [34, 0x652], [35, 0x670], [36, 0x711], [84, 0xc55], [91, 0xc56], [103, 0xe38],
  [107, 0xe48], [118, 0xeb8], [122, 0xec8], [129, 0xf71], [130, 0xf72], [132, 0xf74],
  [202, 0x321], [214, 0x1dce], [216, 0x31b], [218, 0x302a], [220, 0x316], [222, 0x59a],
  [224, 0x302e], [226, 0x1d16d], [228, 0x5ae], [230, 0x300], [232, 0x315], [233, 0x35c],
  [234, 0x35d], [240, 0x345]];

const chr = (cp) => String.fromCodePoint(cp);
const cps = (s) => [...s].map((c) => c.codePointAt(0));
const isSurrogate = (cp) => cp >= 0xd800 && cp <= 0xdfff;
const isHangulSyllable = (cp) => cp >= 0xac00 && cp <= 0xd7a3;
const fail = (msg) => { console.error(`gen_unicode_tables: ${msg}`); process.exit(1); };

// ---- general category: runs of equal category, (first << 8) | index -------
const categoryTests = CATEGORIES.map((c) => new RegExp(`^\\p{gc=${c}}$`, "u"));
const categoryRuns = [];
for (let cp = 0, prev = -1; cp <= MAX; ++cp) {
  const s = chr(cp);
  const k = categoryTests.findIndex((re) => re.test(s));
  if (k < 0) fail(`no category for U+${cp.toString(16)}`);
  if (k !== prev) categoryRuns.push(cp * 256 + k);
  prev = k;
}

// ---- binary properties as [first, last] ranges ------------------------------
const propertyRanges = (name) => {
  const re = new RegExp(`^\\p{${name}}$`, "u");
  const out = [];
  let start = -1;
  for (let cp = 0; cp <= MAX + 1; ++cp) {
    const inside = cp <= MAX && re.test(chr(cp));
    if (inside && start < 0) start = cp;
    if (!inside && start >= 0) { out.push(start, cp - 1); start = -1; }
  }
  return out;
};
const properties = {
  kWhiteSpaceRanges: propertyRanges("White_Space"),
  kAlphabeticRanges: propertyRanges("Alphabetic"),
  kLowercaseRanges: propertyRanges("Lowercase"),
  kUppercaseRanges: propertyRanges("Uppercase"),
};

// ---- simple case folding ----------------------------------------------------
const caseSensitive = /^[\p{CWCF}\p{CWCM}\p{Cased}]$/u;
const candidates = [];
for (let cp = 0; cp <= MAX; ++cp) {
  if (!isSurrogate(cp) && caseSensitive.test(chr(cp))) candidates.push(cp);
}
const parent = new Map(candidates.map((c) => [c, c]));
const root = (x) => { while (parent.get(x) !== x) x = parent.get(x); return x; };
for (let i = 0; i < candidates.length; ++i) {
  const escaped = chr(candidates[i]).replace(/[\\\]\[\-^]/g, (m) => `\\${m}`);
  const re = new RegExp(`^[${escaped}]$`, "iu");
  for (let j = i + 1; j < candidates.length; ++j) {
    if (!re.test(chr(candidates[j]))) continue;
    const a = root(candidates[i]), b = root(candidates[j]);
    if (a !== b) parent.set(b, a);
  }
}
const classes = new Map();
for (const c of candidates) {
  const r = root(c);
  if (!classes.has(r)) classes.set(r, []);
  classes.get(r).push(c);
}
const changesWhenFolded = /^\p{CWCF}$/u;
const caseFold = [];
for (const members of classes.values()) {
  if (members.length < 2) continue;
  const rules = [
    (m) => !changesWhenFolded.test(chr(m)),
    (m) => chr(m).toLowerCase() === chr(m),
    (m) => chr(m).toUpperCase().toLowerCase() === chr(m),
  ];
  let target;
  for (const rule of rules) {
    const picked = members.filter(rule);
    if (picked.length === 1) { target = picked[0]; break; }
  }
  if (target === undefined) {
    const listed = members.map((m) => FOLD_TARGET_EXCEPTIONS.get(m)).filter((t) => t !== undefined);
    if (listed.length !== 1) fail(`ambiguous case folding class ${members.map((m) => m.toString(16))}`);
    target = listed[0];
  }
  for (const m of members) if (m !== target) caseFold.push([m, target]);
}
caseFold.sort((a, b) => a[0] - b[0]);

// ---- decompositions -----------------------------------------------------------
const canonical = [];      // [cp, [decomposition]] where NFD(cp) != cp
const compatibility = [];  // [cp, [decomposition]] where NFKD(cp) != NFD(cp)
for (let cp = 0; cp <= MAX; ++cp) {
  if (isSurrogate(cp) || isHangulSyllable(cp)) continue;
  const s = chr(cp);
  const d = s.normalize("NFD");
  const kd = s.normalize("NFKD");
  if (d !== s) canonical.push([cp, cps(d)]);
  if (kd !== d) compatibility.push([cp, cps(kd)]);
}

// ---- compositions: (first, second) -> primary composite ----------------------
const compositions = [];
for (const [cp, d] of canonical) {
  if (chr(cp).normalize("NFC") !== chr(cp)) continue;  // singleton or excluded
  if (d.length < 2) fail(`primary composite U+${cp.toString(16)} with one-code-point NFD`);
  const first = cps(String.fromCodePoint(...d.slice(0, -1)).normalize("NFC"));
  if (first.length !== 1) fail(`cannot split the composition of U+${cp.toString(16)}`);
  const second = d[d.length - 1];
  if (chr(first[0]).concat(chr(second)).normalize("NFC") !== chr(cp)) {
    fail(`pair for U+${cp.toString(16)} does not compose back`);
  }
  compositions.push([first[0], second, cp]);
}
compositions.sort((a, b) => a[0] - b[0] || a[1] - b[1]);

// ---- canonical combining classes -------------------------------------------
const decomposable = new Set(canonical.map(([cp]) => cp));
const sortsAfter = (x, r) => (chr(x) + chr(r)).normalize("NFD") === chr(r) + chr(x);
for (const [value, ref] of CCC_REFERENCES) {
  // Sanity: every reference sorts strictly after the previous one.
  const i = CCC_REFERENCES.findIndex(([v]) => v === value);
  if (i > 0 && !sortsAfter(ref, CCC_REFERENCES[i - 1][1])) fail(`reference for ${value} misordered`);
}
const cccOf = new Map();
const classOfMark = (cp) => {
  const probe = chr(0x301) + chr(cp) + chr(0x334);
  if (probe.normalize("NFD") === probe) return 0;
  let value = 0;
  for (const [v, ref] of CCC_REFERENCES) {
    if (cp === ref) return v;
    if (sortsAfter(cp, ref)) { value = v; continue; }
    if (!sortsAfter(ref, cp)) return v;  // neither sorts after the other: equal class
    break;
  }
  fail(`U+${cp.toString(16)} sorts after class ${value} but equals no known class`);
};
for (let cp = 0; cp <= MAX; ++cp) {
  if (isSurrogate(cp) || isHangulSyllable(cp) || decomposable.has(cp)) continue;
  const v = classOfMark(cp);
  if (v) cccOf.set(cp, v);
}
// Decomposable code points whose class is not that of their first code point
// (UnicodeData.txt): they never take part in reordering (NFD removes them).
const DECOMPOSABLE_CCC = new Map([[0x340, 230], [0x341, 230], [0x343, 230], [0x344, 230],
  [0xf73, 0], [0xf75, 0], [0xf81, 0]]);
for (const [cp, d] of canonical) {
  const v = DECOMPOSABLE_CCC.has(cp) ? DECOMPOSABLE_CCC.get(cp) : cccOf.get(d[0]) ?? 0;
  if (v) cccOf.set(cp, v);
}
const cccRuns = [];
for (let cp = 0, prev = -1; cp <= MAX; ++cp) {
  const v = cccOf.get(cp) ?? 0;
  if (v !== prev) cccRuns.push(cp * 256 + v);
  prev = v;
}

// ---- output ---------------------------------------------------------------------
const hex = (n) => `0x${n.toString(16)}`;
const wrap = (items, indent = "    ") => {
  const lines = [];
  let line = indent;
  for (const item of items) {
    const piece = `${item},`;
    if (line.length + piece.length + 1 > 100 && line.trim()) { lines.push(line.trimEnd()); line = indent; }
    line += `${piece} `;
  }
  if (line.trim()) lines.push(line.trimEnd());
  return lines.join("\n");
};
const u32Table = (name, values, comment) =>
  `// ${comment}\nconstexpr uint32_t ${name}[] = {\n${wrap(values.map(hex))}\n};\n`;
const decompositionTable = (name, entries, pool) => {
  const items = entries.map(([cp, d]) => {
    const offset = pool.length;
    pool.push(...d);
    return `{${hex(cp)}, ${offset}, ${d.length}}`;
  });
  return `constexpr Decomposition ${name}[] = {\n${wrap(items)}\n};\n`;
};
const pool = [];
const canonicalText = decompositionTable("kCanonicalDecompositions", canonical, pool);
const compatibilityText = decompositionTable("kCompatibilityDecompositions", compatibility, pool);
if (pool.length > 0xffff) fail("decomposition pool exceeds uint16_t offsets");

const out = [];
out.push(`// GENERATED FILE, do not edit. Regenerate with
//   node tools/gen_unicode_tables.mjs > common/text/unicode_data.cpp
// from node ${process.versions.node}: Unicode ${UNICODE}, ICU ${process.versions.icu}.
// How each table is derived from node is described in the generator.
#include "common/text/unicode_data.h"

namespace tandem::text::detail {

const char kUnicodeVersion[] = "${UNICODE}";

namespace {
`);
out.push(u32Table("kCategoryRuns", categoryRuns,
  "General category runs: (first code point << 8) | GeneralCategory index; a run lasts until the next."));
for (const [name, ranges] of Object.entries(properties)) {
  out.push(u32Table(name, ranges, `${name.slice(1, -6)}: inclusive [first, last] pairs.`));
}
out.push(u32Table("kSimpleCaseFolding", caseFold.flat(),
  "Simple case folding: [code point, folded] pairs for code points that fold to another, by code point."));
out.push(u32Table("kCombiningClassRuns", cccRuns,
  "Canonical combining class runs: (first code point << 8) | class."));
out.push(`// Full canonical (NFD) and compatibility (NFKD, only where it differs from NFD)
// decompositions of single code points; Hangul syllables are algorithmic.
constexpr char32_t kDecompositionPool[] = {\n${wrap(pool.map(hex))}\n};
`);
out.push(canonicalText);
out.push(compatibilityText);
out.push(`// Canonical compositions (first, second) -> primary composite, by (first, second).
constexpr Composition kCompositions[] = {\n${wrap(compositions.map(([a, b, c]) => `{${hex(a)}, ${hex(b)}, ${hex(c)}}`))}\n};
`);
out.push(`}  // namespace

constinit const UnicodeTables kTables{
    kCategoryRuns, kWhiteSpaceRanges, kAlphabeticRanges, kLowercaseRanges, kUppercaseRanges,
    kSimpleCaseFolding, kCombiningClassRuns, kDecompositionPool, kCanonicalDecompositions,
    kCompatibilityDecompositions, kCompositions,
};

}  // namespace tandem::text::detail
`);
process.stdout.write(out.join("\n"));
