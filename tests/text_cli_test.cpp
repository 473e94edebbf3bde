// `tandem tokenize`, `detokenize`, `chat-template` and `run --prompt` as a user runs them.
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_support.h"
#include "tests/fixture_support.h"

namespace tandem {
namespace {

using nlohmann::json;

// README: "Hello world" with the fixtures' tiny vocabulary.
const std::vector<uint32_t> kHelloWorld = {72, 101, 375, 111, 272, 261, 108, 100};

TEST(TextCli, TokenizeFromHfDirectoryAndGguf) {
  TANDEM_REQUIRE_FIXTURES();
  for (const char* path : {"qwen3moe/hf", "deepseek3/model-q4_k_m.gguf", "mixtral/hf/tokenizer.json"}) {
    SCOPED_TRACE(path);
    CliResult r = run_tandem("tokenize --tokenizer " + (testing::fixtures_dir() / path).string() +
                             " --text 'Hello world'");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(json::parse(r.out)["ids"].get<std::vector<uint32_t>>(), kHelloWorld);
  }
}

TEST(TextCli, TokenizeFlagsAndFileInput) {
  TANDEM_REQUIRE_FIXTURES();
  const std::string tok = (testing::fixtures_dir() / "qwen3moe/hf").string();
  CliResult parsed = run_tandem("tokenize --tokenizer " + tok + " --text '<|im_end|>'");
  ASSERT_EQ(parsed.code, 0) << parsed.out;
  EXPECT_EQ(json::parse(parsed.out)["ids"], json::array({510}));
  CliResult literal = run_tandem("tokenize --no-parse-special --tokenizer " + tok + " --text '<|im_end|>'");
  ASSERT_EQ(literal.code, 0) << literal.out;
  EXPECT_GT(json::parse(literal.out)["ids"].size(), 1u);

  const std::string file = ::testing::TempDir() + "tandem_text_cli_input.txt";
  std::ofstream(file) << "Hello world";
  CliResult from_file = run_tandem("tokenize --tokenizer " + tok + " --file " + file + " --no-add-special");
  ASSERT_EQ(from_file.code, 0) << from_file.out;
  EXPECT_EQ(json::parse(from_file.out)["ids"].get<std::vector<uint32_t>>(), kHelloWorld);
}

TEST(TextCli, DetokenizeInvertsTokenize) {
  TANDEM_REQUIRE_FIXTURES();
  CliResult r = run_tandem("detokenize --tokenizer " + (testing::fixtures_dir() / "qwen3moe/hf").string() +
                           " --ids '72 101 375 111 272 261 108 100'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["text"], "Hello world");
}

TEST(TextCli, RunWithATextPromptEqualsRunWithItsIds) {
  TANDEM_REQUIRE_FIXTURES();
  const std::string model = (testing::fixtures_dir() / "qwen3moe/model-f32.gguf").string();
  CliResult by_ids = run_tandem("run --model " + model + " --tokens '72 101 375 111 272 261 108 100' -n 10", false);
  ASSERT_EQ(by_ids.code, 0) << by_ids.out;
  const auto generated = json::parse(by_ids.out)["tokens"];
  std::string ids;
  for (const auto& id : generated) ids += std::to_string(id.get<uint32_t>()) + " ";
  CliResult text = run_tandem("detokenize --tokenizer " + model + " --ids '" + ids + "'", false);
  ASSERT_EQ(text.code, 0) << text.out;
  CliResult by_prompt = run_tandem("run --model " + model + " --prompt 'Hello world' -n 10", false);
  ASSERT_EQ(by_prompt.code, 0) << by_prompt.out;
  EXPECT_EQ(by_prompt.out, json::parse(text.out)["text"].get<std::string>() + "\n");
}

TEST(TextCli, ChatTemplateRendersTheModelsTemplate) {
  TANDEM_REQUIRE_FIXTURES();
  const std::string file = ::testing::TempDir() + "tandem_text_cli_messages.json";
  std::ofstream(file) << R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}])";
  for (const char* tok : {"qwen3moe/hf", "qwen3moe/model-f32.gguf"}) {
    SCOPED_TRACE(tok);
    const std::string base = "chat-template --tokenizer " + (testing::fixtures_dir() / tok).string() + " --messages " + file;
    CliResult with = run_tandem(base + " --add-generation-prompt", false);
    ASSERT_EQ(with.code, 0) << with.out;
    EXPECT_TRUE(has(with.out, "<|im_start|>user\nHi there<|im_end|>\n")) << with.out;
    EXPECT_TRUE(with.out.size() > 22 && with.out.substr(with.out.size() - 22) == "<|im_start|>assistant\n") << with.out;
    CliResult without = run_tandem(base, false);
    ASSERT_EQ(without.code, 0) << without.out;
    EXPECT_FALSE(has(without.out, "<|im_start|>assistant")) << without.out;
  }
  CliResult bad = run_tandem("chat-template --tokenizer " + (testing::fixtures_dir() / "qwen3moe/hf").string() + " --messages /nonexistent.json");
  EXPECT_EQ(bad.code, 1);
  EXPECT_TRUE(has(bad.out, "/nonexistent.json")) << bad.out;
}

TEST(TextCli, MisuseGetsAClearMessage) {
  TANDEM_REQUIRE_FIXTURES();
  const std::string tok = (testing::fixtures_dir() / "qwen3moe/hf").string();
  CliResult r = run_tandem("tokenize --tokenizer " + tok);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.out, "exactly one of --text and --file")) << r.out;
  r = run_tandem("tokenize --tokenizer /nonexistent/tok --text x");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.out, "/nonexistent/tok")) << r.out;
  r = run_tandem("detokenize --tokenizer " + tok + " --ids '99999'");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.out, "99999")) << r.out;
  r = run_tandem("run --model " + (testing::fixtures_dir() / "qwen3moe/model-f32.gguf").string() + " -n 2");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.out, "--prompt")) << r.out;
}

}  // namespace
}  // namespace tandem
