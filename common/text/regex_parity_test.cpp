// Differential test of the regex engine against Hugging Face's JavaScript
// tokenizer: random strings over a mixed alphabet (ASCII, contractions,
// whitespace of every kind, CJK, kana, Hangul, Arabic, Devanagari, Thai,
// combining marks, emoji with ZWJ and skin tones, digits of many scripts) are
// split by the Split pre-tokenizer patterns of Qwen, Llama 3, GPT-2 and
// DeepSeek-V3, here and by SplitPreTokenizer's RegExp under node; the match
// boundaries (in code points) must be identical.
//
// Needs node and the npm references: TANDEM_NPM_MODULES names the
// node_modules folder holding @huggingface/tokenizers (ctest sets it after
// installing them). Skips, saying so, when either is missing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/text/regex.h"
#include "common/text/unicode.h"

namespace tandem::text {
namespace {

const char* const kPatterns[] = {
    // Qwen2 / Qwen3
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
    // Llama 3
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
    // GPT-2 ByteLevel
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re",
    // DeepSeek-V3, its three Split patterns
    R"re(\p{N}{1,3})re",
    R"re([一-龥぀-ゟ゠-ヿ]+)re",
    ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
     " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
};

// Pieces the strings are built from: single characters and short runs that
// exercise the alternatives (contractions, CRLF, ZWJ sequences, ...).
const char* const kPieces[] = {
    "a", "b", "Z", "x", "e", "s", "t", "d", "m", "l", "r", "v", "S", "T", "D", "M", "L", "R", "V",
    "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D",
    "'Ll", "\u2019s", " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\u00A0", "\u3000",
    "\u2003", "\u0085", "\u200B", "\uFEFF", "\u2028", "\v", "\f", "0", "1", "7", "42", "12345",
    "\u0663", "\u096A", "\u0E53", "\uFF12", "\u2460", "\u00BD", "\u00B2", "\u2167", ".", ",", "!",
    "?", "-", "_", "(", ")", "[", "]", "{", "}", "\"", "#", "$", "%", "&", "*", "+", "/", "\\",
    ":", ";", "<", "=", ">", "@", "^", "`", "|", "~", "...", "\u2014", "\u00AB", "\u00BB",
    "\u00A9", "\u20AC", "\u4E2D", "\u6587", "\u5B57", "\u9FA5", "\u9FA6", "\u3042", "\u3093",
    "\u30AB", "\u30FC", "\u30FB", "\u3002", "\uFF0C", "\uD55C", "\uAE00", "\u1100\u1161",
    "\u0627\u0644", "\u0639", "\u064B", "\u0928\u094D\u0926", "\u0915\u093F", "\u0E01\u0E34",
    "\u00E9", "e\u0301", "\u0303", "\u0308\u0301", "\u00DF", "\u017F", "\u212A", "\u0130",
    "\u0391", "\u03C9", "\u0416", "\u044F", "\U0001F600", "\U0001F44D\U0001F3FD",
    "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\u2764\uFE0F", "\U0001F1FA\U0001F1F8",
    "\U0001D400", "\U00020000",
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// matchAll over SplitPreTokenizer's RegExp; UTF-16 offsets turned into code
// point offsets.
constexpr const char* kScript = R"js(
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");
const [modules, inputPath, outputPath] = process.argv.slice(2);
const { SplitPreTokenizer } = createRequire(path.join(modules, "noop.js"))("@huggingface/tokenizers");
const input = JSON.parse(fs.readFileSync(inputPath, "utf8"));
const output = input.patterns.map((pattern) => {
  const re = new SplitPreTokenizer({ pattern: { Regex: pattern }, behavior: "Isolated" }).pattern;
  return input.texts.map((text) => {
    const cp = new Map();
    let n = 0;
    for (let i = 0; i < text.length; i += text.codePointAt(i) > 0xffff ? 2 : 1) cp.set(i, n++);
    cp.set(text.length, n);
    return [...text.matchAll(re)].map((m) => [cp.get(m.index), cp.get(m.index + m[0].length)]);
  });
});
fs.writeFileSync(outputPath, JSON.stringify(output));
)js";

TEST(RegexParity, RandomTextSplitsLikeHuggingFaceJs) {
  const std::string modules = env_or("TANDEM_NPM_MODULES", "");
  if (modules.empty()) {
    GTEST_SKIP() << "TANDEM_NPM_MODULES is unset (run through ctest, which installs the npm references)";
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";

  std::mt19937 rng(20240611);
  std::vector<std::string> texts;
  for (int i = 0; i < 4000; ++i) {
    std::string t;
    const size_t pieces = rng() % 40;
    for (size_t k = 0; k < pieces; ++k) t += kPieces[rng() % std::size(kPieces)];
    texts.push_back(std::move(t));
  }
  nlohmann::json input;
  input["patterns"] = std::vector<std::string>(std::begin(kPatterns), std::end(kPatterns));
  input["texts"] = texts;

  char tmpl[] = "/tmp/tandem_regex_parity_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  std::ofstream(dir / "script.js") << kScript;
  std::ofstream(dir / "input.json") << input.dump();
  const std::string cmd = "node '" + (dir / "script.js").string() + "' '" + modules + "' '" +
                          (dir / "input.json").string() + "' '" + (dir / "output.json").string() + "'";
  const int rc = std::system(cmd.c_str());
  std::stringstream raw;
  raw << std::ifstream(dir / "output.json").rdbuf();
  std::filesystem::remove_all(dir);
  ASSERT_EQ(rc, 0) << cmd;
  const nlohmann::json expected = nlohmann::json::parse(raw.str());
  ASSERT_EQ(expected.size(), std::size(kPatterns));

  std::vector<Regex::Match> got;
  for (size_t p = 0; p < std::size(kPatterns); ++p) {
    const Regex re = Regex::compile(kPatterns[p]);
    int failures = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      re.find_all(decode_utf8(texts[i]), got);
      std::vector<std::pair<size_t, size_t>> ours;
      for (const Regex::Match& m : got) ours.emplace_back(m.begin, m.end);
      const auto theirs = expected[p][i].get<std::vector<std::pair<size_t, size_t>>>();
      if (ours != theirs && failures++ < 5) {
        ADD_FAILURE() << "pattern " << kPatterns[p] << "\ntext " << testing::PrintToString(texts[i])
                      << "\nours " << testing::PrintToString(ours) << "\nnode " << testing::PrintToString(theirs);
      }
    }
    EXPECT_EQ(failures, 0) << kPatterns[p];
  }
}

}  // namespace
}  // namespace tandem::text
