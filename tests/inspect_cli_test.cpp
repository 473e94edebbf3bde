// `tandem inspect` as a user runs it: the real binary, its stdout, stderr and
// exit code.
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_support.h"
#include "tests/fixture_support.h"

namespace tandem {
namespace {

TEST(InspectCli, DescribesAGgufFile) {
  TANDEM_REQUIRE_FIXTURES();
  CliResult r = run_tandem("inspect --model " + (testing::fixtures_dir() / "deepseek3/model-q4_k_m.gguf").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "GGUF v3")) << r.out;
  EXPECT_TRUE(has(r.out, "deepseek_v3"));
  EXPECT_TRUE(has(r.out, "MLA                    q_lora 128 kv_lora 128 nope 32 rope 32 v 32"));
  EXPECT_TRUE(has(r.out, "sigmoid + correction bias"));
  EXPECT_TRUE(has(r.out, "q4_k"));
  EXPECT_TRUE(has(r.out, "q5_0"));
  EXPECT_TRUE(has(r.out, "blk.1.ffn_down_exps.weight"));
  EXPECT_TRUE(has(r.out, "[16,256,256]"));  // stacked experts, row-major
}

TEST(InspectCli, DescribesAnHfDirectoryAsJson) {
  TANDEM_REQUIRE_FIXTURES();
  CliResult r = run_tandem("inspect --json --model " + (testing::fixtures_dir() / "mixtral/hf").string());
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "safetensors");
  EXPECT_EQ(j["architecture"], "mixtral");
  EXPECT_EQ(j["stored"].size(), 65u);
  bool found = false;
  for (auto& t : j["tensors"])
    if (t["name"] == "blk.0.ffn_gate_exps.weight") {
      found = true;
      EXPECT_EQ(t["shape"], nlohmann::json({8, 256, 256}));
      EXPECT_EQ(t["zero_copy"], false);  // gathered from 8 per-expert tensors
    }
  EXPECT_TRUE(found);
}

TEST(InspectCli, CorruptFileGivesAClearErrorAndExitCode) {
  std::string path = ::testing::TempDir() + "/inspect_cli_corrupt.gguf";
  { std::ofstream(path, std::ios::binary) << "GGUF\x03\0\0\0garbage"; }
  CliResult r = run_tandem("inspect --model " + path);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.out, path)) << r.out;
  EXPECT_TRUE(has(r.out, "truncated")) << r.out;
  EXPECT_TRUE(has(r.out, "launcher/0 pid")) << r.out;  // logs carry role and pid
  r = run_tandem("inspect --model /nonexistent/model.gguf");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.out, "no such file or directory")) << r.out;
  r = run_tandem("inspect --bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "unknown option '--bogus'")) << r.out;
}

}  // namespace
}  // namespace tandem
