#include "common/text/unicode.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <fmt/format.h>

namespace tandem::text {
namespace {

using G = GeneralCategory;

std::string hex(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) out += fmt::format("{}{:x}", out.empty() ? "" : " ", static_cast<uint32_t>(c));
  return out;
}

TEST(Unicode, GeneralCategory) {
  const std::pair<char32_t, G> cases[] = {
      {'A', G::kLu}, {'a', G::kLl}, {0x1C5, G::kLt}, {0x2B0, G::kLm}, {0x4E2D, G::kLo},
      {0x301, G::kMn}, {0x903, G::kMc}, {0x20DD, G::kMe}, {'5', G::kNd}, {0x216B, G::kNl},
      {0xBD, G::kNo}, {'_', G::kPc}, {'-', G::kPd}, {'(', G::kPs}, {')', G::kPe},
      {0xAB, G::kPi}, {0xBB, G::kPf}, {'!', G::kPo}, {'+', G::kSm}, {'$', G::kSc},
      {'^', G::kSk}, {0xA9, G::kSo}, {' ', G::kZs}, {0x2028, G::kZl}, {0x2029, G::kZp},
      {0, G::kCc}, {0x200B, G::kCf}, {0xD800, G::kCs}, {0xE000, G::kCo}, {0x378, G::kCn},
      {0x10FFFF, G::kCn}, {0x110000, G::kCn}, {0x1F600, G::kSo}, {0x0295, G::kLo},  // Ll before Unicode 16
  };
  for (auto [cp, gc] : cases) {
    EXPECT_EQ(to_string(general_category(cp)), std::string(to_string(gc))) << std::hex << static_cast<uint32_t>(cp);
  }
}

TEST(Unicode, BinaryProperties) {
  for (char32_t c : {0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028,
                     0x2029, 0x202F, 0x205F, 0x3000}) {
    EXPECT_TRUE(is_white_space(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (char32_t c : {0x200B, 0xFEFF, 0x180E, 0x61, 0x1C}) EXPECT_FALSE(is_white_space(c)) << std::hex << static_cast<uint32_t>(c);
  EXPECT_TRUE(is_alphabetic('a'));
  EXPECT_TRUE(is_alphabetic(0x345));   // a mark, yet Alphabetic
  EXPECT_TRUE(is_alphabetic(0x2160));  // Roman numeral (Nl)
  EXPECT_TRUE(is_alphabetic(0x4E2D));
  EXPECT_FALSE(is_alphabetic('1'));
  EXPECT_FALSE(is_alphabetic(0x301));
  EXPECT_TRUE(is_lowercase(0xAA));  // ª: Lo, yet Lowercase
  EXPECT_TRUE(is_uppercase(0x2160));
  EXPECT_FALSE(is_uppercase('a'));
}

TEST(Unicode, SimpleCaseFolding) {
  const std::pair<char32_t, char32_t> cases[] = {
      {'A', 'a'}, {'a', 'a'}, {'1', '1'}, {0x212A, 'k'}, {0x17F, 's'}, {0x3A3, 0x3C3},
      {0x3C2, 0x3C3}, {0x1E9E, 0xDF}, {0xAB70, 0x13A0}, {0x13F8, 0x13F0}, {0x130, 0x130},
      {0x131, 0x131}, {0x345, 0x3B9}, {0x1FBE, 0x3B9}, {0x10400, 0x10428}, {0xFB05, 0xFB06},
  };
  for (auto [cp, folded] : cases) EXPECT_EQ(simple_case_fold(cp), folded) << std::hex << static_cast<uint32_t>(cp);
}

TEST(Unicode, CombiningClassAndRanges) {
  EXPECT_EQ(canonical_combining_class('a'), 0);
  EXPECT_EQ(canonical_combining_class(0x301), 230);
  EXPECT_EQ(canonical_combining_class(0x334), 1);
  EXPECT_EQ(canonical_combining_class(0x327), 202);
  EXPECT_EQ(canonical_combining_class(0x5B0), 10);
  EXPECT_EQ(canonical_combining_class(0x1D165), 216);
  EXPECT_EQ(category_ranges(category_bit(G::kNd)).front(), (CodePointRange{'0', '9'}));
  EXPECT_EQ(property_ranges(BinaryProperty::kWhiteSpace).front(), (CodePointRange{9, 0xD}));
  // Ranges of a mask merge across adjacent categories: A..Z (Lu) [ (Ps)...
  auto letters = category_ranges(kLetterCategories);
  EXPECT_EQ(letters[0], (CodePointRange{'A', 'Z'}));
  EXPECT_EQ(letters[1], (CodePointRange{'a', 'z'}));
  auto all = category_ranges((1u << kGeneralCategoryCount) - 1);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], (CodePointRange{0, 0x10FFFF}));
}

TEST(Utf8, DecodesInvalidInputAsTextDecoder) {
  // Expected values from node's new TextDecoder().decode(...).
  const std::pair<std::string_view, std::u32string_view> cases[] = {
      {"abc", U"abc"},
      {"\xC3\xA9", U"\u00E9"},
      {"\xF0\x9F\x98\x80", U"\U0001F600"},
      {"\x80", U"\uFFFD"},
      {"\xC3", U"\uFFFD"},
      {"\xE2\x82", U"\uFFFD"},
      {"\xE2\x82x", U"\uFFFDx"},
      {"\xF0\x9F\x98", U"\uFFFD"},
      {"\xC0\xAF", U"\uFFFD\uFFFD"},
      {"\xE0\x80\xAF", U"\uFFFD\uFFFD\uFFFD"},
      {"\xED\xA0\x80", U"\uFFFD\uFFFD\uFFFD"},
      {"\xF4\x90\x80\x80", U"\uFFFD\uFFFD\uFFFD\uFFFD"},
      {"\xF5", U"\uFFFD"},
      {"\xFF", U"\uFFFD"},
      {"\xF0\x9F\x98\x80\x80", U"\U0001F600\uFFFD"},
      {"a\xF0\x9F\xC3\xA9", U"a\uFFFD\u00E9"},
      {"\xF4\x8F\xBF\xBF", U"\U0010FFFF"},
      {"\xE0\xA0", U"\uFFFD"},
      {std::string_view("\0x", 2), std::u32string_view(U"\0x", 2)},
  };
  for (auto [bytes, expected] : cases) {
    EXPECT_EQ(hex(decode_utf8(bytes)), hex(expected)) << testing::PrintToString(std::string(bytes));
    const bool valid = expected.find(kReplacementCharacter) == std::u32string_view::npos;
    EXPECT_EQ(is_valid_utf8(bytes), valid) << testing::PrintToString(std::string(bytes));
  }
  EXPECT_TRUE(is_valid_utf8("\xEF\xBF\xBD"));  // U+FFFD itself
  EXPECT_TRUE(is_valid_utf8(""));
}

TEST(Utf8, EncodeRoundTripsEveryScalarValue) {
  std::u32string all;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c < 0xD800 || c > 0xDFFF) all.push_back(c);
  }
  const std::string bytes = encode_utf8(all);
  EXPECT_TRUE(is_valid_utf8(bytes));
  EXPECT_EQ(decode_utf8(bytes), all);
  std::string out;
  append_utf8(out, 0xD800);
  append_utf8(out, 0x110000);
  EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBD");
  std::u32string appended = U"x";
  decode_utf8_append("y\xC3\xA9", appended);
  EXPECT_EQ(appended, U"xy\u00E9");
}

TEST(Utf8, CompletePrefixHoldsBackOnlyIncompleteValidTails) {
  const std::pair<std::string_view, size_t> cases[] = {
      {"", 0}, {"abc", 3}, {"ab\xE2\x82", 2}, {"ab\xE2", 2}, {"\xF0\x9F\x98", 0},
      {"\xF0\x9F\x98\x80", 4}, {"ab\x80", 3}, {"ab\xE0\x80", 4}, {"ab\xED\xA0", 4},
      {"\xC3", 0}, {"a\xF4\x8F\xBF", 1}, {"a\xF4\x90", 3}, {"\x80\x80\x80\x80", 4},
      {"\xC3\xA9\xC3", 2}, {"x\xF0", 1}, {"x\xF8", 2},
  };
  for (auto [bytes, expected] : cases) {
    EXPECT_EQ(utf8_complete_prefix(bytes), expected) << testing::PrintToString(std::string(bytes));
  }
}

TEST(Normalization, KnownStrings) {
  // Expected values from node's String.prototype.normalize.
  struct Case { NormalizationForm form; std::u32string_view in, out; };
  using F = NormalizationForm;
  const Case cases[] = {
      {F::kNFC, U"e\u0301", U"\u00E9"},
      {F::kNFD, U"\u00E9", U"e\u0301"},
      {F::kNFKC, U"\uFB01", U"fi"},
      {F::kNFKD, U"\u2460", U"1"},
      {F::kNFC, U"\u1100\u1161\u11A8", U"\uAC01"},
      {F::kNFD, U"\uAC01", U"\u1100\u1161\u11A8"},
      {F::kNFC, U"a\u0301\u0328", U"\u0105\u0301"},
      {F::kNFD, U"\u1E69", U"s\u0323\u0307"},
      {F::kNFC, U"s\u0307\u0323", U"\u1E69"},
      {F::kNFC, U"\u212B", U"\u00C5"},
      {F::kNFKC, U"\u337F", U"\u682A\u5F0F\u4F1A\u793E"},
      {F::kNFC, U"e\u0301\u0301", U"\u00E9\u0301"},
      {F::kNFC, U"\u1100\u0301\u1161", U"\u1100\u0301\u1161"},
      {F::kNFD, U"\u0344", U"\u0308\u0301"},
      {F::kNFKD, U"\uFDFA",
       U"\u0635\u0644\u0649 \u0627\u0644\u0644\u0647 \u0639\u0644\u064A\u0647 \u0648\u0633\u0644\u0645"},
      {F::kNFC, U"\u0F73", U"\u0F71\u0F72"},
      {F::kNFKC, U"x\u00A0y\u00B2", U"x y2"},
      {F::kNFC, U"\u0B47\u0B3E", U"\u0B4B"},
      {F::kNFC, U"\u00C5\u0328", U"\u0104\u030A"},
      {F::kNFD, U"\u01D6", U"u\u0308\u0304"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(hex(normalize(c.in, c.form)), hex(c.out)) << hex(c.in);
  }
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(nfd("\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(nfkc("\xEF\xAC\x81"), "fi");
  EXPECT_EQ(nfkd("\xE2\x91\xA0"), "1");
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("bad \xC3"), "bad \xEF\xBF\xBD");
}

TEST(Normalization, LongMarkRunsAreSortedStably) {
  // 10k alternating marks of classes 230 and 220: one run, sorted by class
  // with the original order kept within a class.
  std::u32string in = U"a";
  for (int i = 0; i < 5000; ++i) in += U"\u0301\u0323\u0300\u0316";
  const std::u32string out = normalize(in, NormalizationForm::kNFD);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 1; i <= 10000; ++i) EXPECT_EQ(out[i], i % 2 ? 0x323 : 0x316) << i;
  for (size_t i = 10001; i < out.size(); ++i) EXPECT_EQ(out[i], i % 2 ? 0x301 : 0x300) << i;
}

// ---- parity with node -----------------------------------------------------------
// node's String.prototype.normalize, RegExp \p{..} and /iu define what these
// functions must return. Skipped when node is missing or speaks another
// Unicode version than the tables.
class NodeParity : public testing::Test {
 protected:
  void SetUp() override {
    if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
    char tmpl[] = "/tmp/tandem_unicode_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string version = run("console.log(process.versions.unicode)", "");
    if (version != std::string(unicode_version()) + "\n") {
      GTEST_SKIP() << "node has Unicode " << version << ", the tables " << unicode_version();
    }
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // Runs `script` under node with the file `input` holds as argv[2]; returns stdout.
  std::string run(const std::string& script, const std::string& input) {
    write(dir_ + "/script.js", script);
    write(dir_ + "/input.txt", input);
    const std::string cmd = "node '" + dir_ + "/script.js' '" + dir_ + "/input.txt' > '" + dir_ + "/out.txt'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(dir_ + "/out.txt");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  // Compares line by line, naming the first few differences.
  static void expect_same_lines(const std::string& ours, const std::string& node) {
    std::istringstream a(ours), b(node);
    std::string x, y;
    int shown = 0, line = 0;
    while (true) {
      const bool more_a = static_cast<bool>(std::getline(a, x)), more_b = static_cast<bool>(std::getline(b, y));
      if (!more_a && !more_b) break;
      ++line;
      if (x != y && shown++ < 10) ADD_FAILURE() << "line " << line << ": ours \"" << x << "\", node \"" << y << "\"";
      if (!more_a || !more_b) break;
    }
    EXPECT_EQ(shown, 0);
  }
  std::string dir_;
};

constexpr const char* kNodeHex = R"(
const hex = (s) => [...s].map((c) => c.codePointAt(0).toString(16)).join(" ");
const forms = (s) => ["NFC", "NFD", "NFKC", "NFKD"].map((f) => hex(s.normalize(f))).join(";");
)";

std::string our_forms(std::u32string_view s) {
  using F = NormalizationForm;
  return hex(normalize(s, F::kNFC)) + ";" + hex(normalize(s, F::kNFD)) + ";" +
         hex(normalize(s, F::kNFKC)) + ";" + hex(normalize(s, F::kNFKD));
}

TEST_F(NodeParity, EverySingleCodePointNormalizes) {
  const std::string node = run(std::string(kNodeHex) + R"(
const out = [];
for (let cp = 0; cp <= 0x10ffff; ++cp) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  const s = String.fromCodePoint(cp);
  if (["NFC", "NFD", "NFKC", "NFKD"].every((f) => s.normalize(f) === s)) continue;
  out.push(cp.toString(16) + ":" + forms(s));
}
console.log(out.join("\n"));
)", "");
  std::string ours;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::u32string s(1, cp);
    const std::string f = our_forms(s);
    if (f == fmt::format("{0:x};{0:x};{0:x};{0:x}", static_cast<uint32_t>(cp))) continue;
    ours += fmt::format("{:x}:{}\n", static_cast<uint32_t>(cp), f);
  }
  expect_same_lines(ours, node);
}

TEST_F(NodeParity, RandomCombiningSequencesNormalize) {
  // Starters that compose, marks of many classes (so reordering and blocking
  // happen), Hangul jamo and syllables, compatibility characters.
  const std::u32string alphabet =
      U"aeosuAE\u00C5\u01D6\u1E63\u0105\u1100\u1112\u1161\u1175\u11A8\u11C2\uAC00\uAC01\u0B47"
      U"\u0B3E\u0B57\u0BC6\u0BBE\u0F71\u0F72\u0F73\u0F80\u304B\u3099\u309A\u0915\u093C\u094D"
      U"\u0300\u0301\u0304\u0307\u0308\u030A\u0323\u0327\u0328\u0334\u0345\u05B0\u05B4\u0591"
      U"\U0001D165\U0001D16D\u302A\uFB01\u2460\u00A0\u00B2\u1E9B\u0385\u1FEE\u3300\u212B\u0344 x";
  std::mt19937 rng(1234);
  std::string input, ours;
  for (int i = 0; i < 20000; ++i) {
    std::u32string s;
    const size_t len = 1 + rng() % 10;
    for (size_t k = 0; k < len; ++k) s.push_back(alphabet[rng() % alphabet.size()]);
    input += hex(s) + "\n";
    ours += our_forms(s) + "\n";
  }
  const std::string node = run(std::string(kNodeHex) + R"(
const lines = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n");
console.log(lines.map((l) => forms(String.fromCodePoint(...l.split(" ").map((h) => parseInt(h, 16))))).join("\n"));
)", input);
  expect_same_lines(ours, node);
}

TEST_F(NodeParity, PropertiesOfEveryCodePoint) {
  // Runs of (category, White_Space, Alphabetic, Lowercase, Uppercase).
  const std::string node = run(R"(
const cats = ["Lu","Ll","Lt","Lm","Lo","Mn","Mc","Me","Nd","Nl","No","Pc","Pd","Ps","Pe","Pi",
  "Pf","Po","Sm","Sc","Sk","So","Zs","Zl","Zp","Cc","Cf","Cs","Co","Cn"].map((c) => [c, new RegExp(`^\\p{gc=${c}}$`, "u")]);
const props = ["White_Space", "Alphabetic", "Lowercase", "Uppercase"].map((p) => new RegExp(`^\\p{${p}}$`, "u"));
const out = [];
let prev = "";
for (let cp = 0; cp <= 0x10ffff; ++cp) {
  const s = String.fromCodePoint(cp);
  const key = cats.find(([, re]) => re.test(s))[0] + props.map((re) => (re.test(s) ? 1 : 0)).join("");
  if (key !== prev) out.push(cp.toString(16) + " " + key);
  prev = key;
}
console.log(out.join("\n"));
)", "");
  std::string ours, prev;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    const std::string key = fmt::format("{}{:d}{:d}{:d}{:d}", to_string(general_category(cp)), is_white_space(cp),
                                        is_alphabetic(cp), is_lowercase(cp), is_uppercase(cp));
    if (key != prev) ours += fmt::format("{:x} {}\n", static_cast<uint32_t>(cp), key);
    prev = key;
  }
  expect_same_lines(ours, node);
}

TEST_F(NodeParity, CaseFoldingClassesMatchRegExpIu) {
  // Every code point that /^[c]$/iu matches together with another one, with
  // the smallest member of its class.
  const std::string node = run(R"(
const cand = [];
for (let cp = 0; cp <= 0x10ffff; ++cp) {
  if ((cp < 0xd800 || cp > 0xdfff) && /^[\p{CWCF}\p{CWCM}\p{Cased}]$/u.test(String.fromCodePoint(cp))) cand.push(cp);
}
const rep = new Map();
for (const c of cand) {
  if (rep.has(c)) continue;
  const esc = String.fromCodePoint(c).replace(/[\\\]\[\-^]/g, (m) => "\\" + m);
  const re = new RegExp(`^[${esc}]$`, "iu");
  const members = cand.filter((d) => re.test(String.fromCodePoint(d)));
  if (members.length > 1) for (const m of members) rep.set(m, members[0]);
}
console.log([...rep].sort((a, b) => a[0] - b[0]).map(([c, r]) => c.toString(16) + " " + r.toString(16)).join("\n"));
)", "");
  std::map<char32_t, std::vector<char32_t>> classes;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp < 0xD800 || cp > 0xDFFF) classes[simple_case_fold(cp)].push_back(cp);
  }
  std::map<char32_t, char32_t> rep;
  for (const auto& [fold, members] : classes) {
    if (members.size() > 1) for (char32_t m : members) rep[m] = members.front();
  }
  std::string ours;
  for (auto [c, r] : rep) ours += fmt::format("{:x} {:x}\n", static_cast<uint32_t>(c), static_cast<uint32_t>(r));
  expect_same_lines(ours, node);
}

}  // namespace
}  // namespace tandem::text
