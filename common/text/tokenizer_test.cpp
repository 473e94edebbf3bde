// The tokenizer on the fixtures' tiny vocabulary (ids listed in the fixtures'
// README, from hf/ and from every GGUF), on small hand-made tokenizer.json
// files that exercise one feature each, and its error messages.
#include "common/text/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/text/unicode.h"

#ifndef TANDEM_FIXTURES_DEFAULT
#define TANDEM_FIXTURES_DEFAULT ""
#endif

namespace tandem::text {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<uint32_t>;

std::string fixtures() {
  const char* env = std::getenv("TANDEM_FIXTURES");
  return env && *env ? env : TANDEM_FIXTURES_DEFAULT;
}

// The README's strings and ids (llama.cpp's tokenisation of the tiny vocab).
struct Expected {
  std::string text;
  Ids ids;
};
const std::vector<Expected>& readme_cases() {
  static const std::vector<Expected> cases = {
      {"Hello world", {72, 101, 375, 111, 272, 261, 108, 100}},
      {"The General Public License is a free, copyleft license for software and other kinds of "
       "works.",
       {467, 506, 329, 440, 335, 337, 257, 285, 447, 44, 352, 461, 102, 116, 404, 324, 507, 322,
        409, 32, 107, 263, 100, 115, 278, 311, 115, 46}},
      {"  Don't  stop: 1234567 résumé — naïve café!? <|im_start|>user\nhi<|im_end|>\n",
       {32,  32,  68,  262, 39,  116, 32,  284, 116, 485, 58,  32,  49,  50,  51,  52,  53, 54,
        55,  32,  114, 195, 169, 453, 109, 195, 169, 32,  226, 128, 148, 303, 97,  195, 175, 309,
        266, 97,  102, 195, 169, 33,  63,  32,  509, 117, 454, 10,  104, 105, 510, 10}},
  };
  return cases;
}

std::vector<std::string> fixture_tokenizer_paths() {
  std::vector<std::string> paths;
  for (const char* folder : {"qwen3moe", "qwen2moe", "mixtral", "deepseek3", "deepseek3-fp8"}) {
    const fs::path dir = fs::path(fixtures()) / folder;
    if (!fs::is_directory(dir)) continue;  // no fixtures beside this checkout: the tests skip
    if (fs::exists(dir / "hf")) paths.push_back((dir / "hf").string());
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
  }
  return paths;
}

TEST(Tokenizer, FixtureReadmeIdsFromEveryHfDirectoryAndGguf) {
  const auto paths = fixture_tokenizer_paths();
  if (paths.empty()) GTEST_SKIP() << "fixtures not found at '" << fixtures() << "' (TANDEM_FIXTURES)";
  ASSERT_GE(paths.size(), 14u) << "expected 5 hf/ directories and 9 GGUF files";
  for (const auto& p : paths) {
    SCOPED_TRACE(p);
    auto tok = Tokenizer::load(p);
    for (const auto& c : readme_cases()) {
      EXPECT_EQ(tok.encode(c.text), c.ids) << c.text;
      EXPECT_EQ(tok.decode(c.ids), c.text);
    }
  }
}

TEST(Tokenizer, SpecialTokenTextIsParsedOnlyWhenAsked) {
  const auto paths = fixture_tokenizer_paths();
  if (paths.empty()) GTEST_SKIP() << "fixtures not found (TANDEM_FIXTURES)";
  auto tok = Tokenizer::load(paths.front());
  const Ids parsed = tok.encode("<|im_start|>hi");
  ASSERT_FALSE(parsed.empty());
  EXPECT_EQ(parsed.front(), 509u);
  EXPECT_TRUE(tok.is_special(509));
  EncodeOptions plain;
  plain.parse_special = false;
  const Ids literal = tok.encode("<|im_start|>hi", plain);
  EXPECT_GT(literal.size(), parsed.size());
  EXPECT_EQ(std::find(literal.begin(), literal.end(), 509u), literal.end());
  EXPECT_EQ(tok.decode(literal), "<|im_start|>hi");
  DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(tok.decode(parsed, skip), "hi");
}

TEST(Tokenizer, StreamingNeverSplitsACharacter) {
  const auto paths = fixture_tokenizer_paths();
  if (paths.empty()) GTEST_SKIP() << "fixtures not found (TANDEM_FIXTURES)";
  auto tok = Tokenizer::load(paths.front());
  // The tiny vocabulary spells most non-ASCII text byte by byte.
  const std::string text = "naïve café — 日本語 😀 done";
  const Ids ids = tok.encode(text);
  StreamDecoder stream(tok);
  std::string joined;
  size_t held_back = 0;
  for (uint32_t id : ids) {
    const std::string piece = stream.step(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "piece after id " << id;
    if (piece.empty()) ++held_back;
    joined += piece;
  }
  joined += stream.finish();
  EXPECT_EQ(joined, text);
  EXPECT_GT(held_back, 3u) << "multi-byte characters should have been held back";
}

// A small tokenizer.json written by the test.
std::string write_tokenizer(const std::string& name, const nlohmann::json& j) {
  const fs::path dir = fs::temp_directory_path() / ("tandem_tok_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  return dir.string();
}

nlohmann::json sentencepiece_like() {
  // Llama-2 style: metaspace via normalizer, byte fallback, <s> added in front.
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  uint32_t next = 259;
  for (const char* t : {"\u2581", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "llo", "hello",
                        "\u2581hello", "\u2581w", "or", "\u2581wor", "\u2581world", "ld"})
    vocab[t] = next++;
  return {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\u2581"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"}, {"byte_fallback", true}, {"fuse_unk", true}, {"unk_token", "<unk>"},
        {"vocab", vocab},
        {"merges", {"h e", "l l", "ll o", "he llo", "\u2581 hello", "\u2581 w", "o r",
                    "\u2581w or", "l d", "\u2581wor ld"}}}}};
}

TEST(Tokenizer, SentencePieceStyleWithByteFallback) {
  const std::string dir = write_tokenizer("sp", sentencepiece_like());
  auto tok = Tokenizer::load(dir);
  const uint32_t hello = *tok.token_id("\u2581hello"), world = *tok.token_id("\u2581world");
  EXPECT_EQ(tok.encode("hello world"), (Ids{1, hello, world}));
  EncodeOptions no_bos;
  no_bos.add_special = false;
  EXPECT_EQ(tok.encode("hello world", no_bos), (Ids{hello, world}));
  // "é" is not in the vocabulary: its two UTF-8 bytes as <0xC3><0xA9>.
  const Ids e = tok.encode("hello é", no_bos);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[2], 3u + 0xC3);
  EXPECT_EQ(e[3], 3u + 0xA9);
  EXPECT_EQ(tok.decode(e), "hello é");
  EXPECT_EQ(tok.decode(tok.encode("hello world")), "<s> hello world");
  DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(tok.decode(tok.encode("hello world"), skip), "hello world");
  fs::remove_all(dir);
}

TEST(Tokenizer, MalformedUtf8IsReadAsTextDecoderReadsIt) {
  const auto paths = fixture_tokenizer_paths();
  if (paths.empty()) GTEST_SKIP() << "fixtures not found (TANDEM_FIXTURES)";
  auto tok = Tokenizer::load(paths.front());
  const std::string bad = "a\xff" "b\xc3";
  EXPECT_EQ(tok.encode(bad), tok.encode("a\xEF\xBF\xBD" "b\xEF\xBF\xBD"));
  EXPECT_EQ(tok.decode(tok.encode(bad)), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
}

TEST(Tokenizer, ErrorsNameTheCause) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { Tokenizer::load("/nonexistent/dir/tokenizer.json"); }).find("/nonexistent"),
            std::string::npos);
  auto j = sentencepiece_like();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  const std::string dir = write_tokenizer("bad_norm", j);
  const std::string m = message([&] { Tokenizer::load(dir); });
  EXPECT_NE(m.find("Precompiled"), std::string::npos) << m;
  EXPECT_NE(m.find("not supported"), std::string::npos) << m;
  auto tok = Tokenizer::load(write_tokenizer("ok", sentencepiece_like()));
  const Ids out_of_range{100000};
  EXPECT_NE(message([&] { tok.decode(out_of_range); }).find("100000"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::text
