#include "common/text/tokenizer_json.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

#ifndef TANDEM_FIXTURES_DEFAULT
#define TANDEM_FIXTURES_DEFAULT ""
#endif

namespace tandem {
namespace {
using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kLabel = "tok.json";

std::string fixture_tokenizer() {
  const char* env = std::getenv("TANDEM_FIXTURES");
  std::string dir = env && *env ? env : TANDEM_FIXTURES_DEFAULT;
  std::string p = dir + "/qwen3moe/hf/tokenizer.json";
  return !dir.empty() && fs::exists(p) ? p : "";
}

// A small valid byte-level BPE tokenizer.json.
json small() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 7, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true},
      {"id": 2, "content": "ab", "special": false}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3, "abc": 4, "Ġ": 5, "Ġc": 6},
              "merges": ["a b", "ab c", "Ġ c"]}
  })");
}

TokenizerSpec parse(const json& j, const TokenizerLimits& limits = {}) {
  return parse_tokenizer_json(j.dump(), kLabel, limits);
}
TokenizerSpec parse_text(std::string_view text) {
  return parse_tokenizer_json(text, kLabel);
}

// Expects an Error naming the file whose message contains every needle.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> needles,
                  std::optional<ErrorKind> kind = std::nullopt) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected: " << *needles.begin();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(kLabel), std::string::npos) << m;
    for (const auto& n : needles)
      EXPECT_NE(m.find(n), std::string::npos) << "[" << n << "] in: " << m;
    if (kind) {
      EXPECT_EQ(e.kind(), *kind) << m;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unrelated exception: " << e.what();
  }
}
#define EXPECT_TOKENIZER_ERROR(stmt, ...) expect_error([&] { stmt; }, __VA_ARGS__)

TEST(TokenizerJson, SmallBpe) {
  TokenizerSpec s = parse(small());
  EXPECT_EQ(s.source, kLabel);
  EXPECT_EQ(s.model, TokenizerModel::kBPE);
  EXPECT_EQ(s.vocab.size(), 7u);
  EXPECT_EQ(s.vocab.at("abc"), 4u);
  ASSERT_EQ(s.merges.size(), 3u);
  EXPECT_EQ(s.merges[1], (std::pair<std::string, std::string>{"ab", "c"}));
  EXPECT_EQ(s.n_ids(), 8u);
  EXPECT_EQ(s.id_to_token[7], "<|end|>");
  EXPECT_EQ(s.id_to_token[6], "Ġc");
  ASSERT_EQ(s.added_tokens.size(), 2u);
  EXPECT_TRUE(s.added_tokens[0].special);
  EXPECT_FALSE(s.added_tokens[0].normalized);
  EXPECT_FALSE(s.added_tokens[1].special);
  EXPECT_TRUE(s.added_tokens[1].normalized);  // default !special
  EXPECT_EQ(s.find("<|end|>"), 7u);
  EXPECT_EQ(s.find("Ġc"), 6u);
  EXPECT_FALSE(s.find("zz").has_value());
  EXPECT_EQ(s.find_added(7)->content, "<|end|>");
  EXPECT_EQ(s.pre_tokenizer["type"], "ByteLevel");
  EXPECT_TRUE(s.normalizer.is_null());
  EXPECT_FALSE(s.model_options.contains("vocab"));
  EXPECT_EQ(s.model_options["type"], "BPE");
  EXPECT_FALSE(s.unk_token.has_value());
  EXPECT_FALSE(s.byte_fallback);
}

TEST(TokenizerJson, MergesAsPairsEqualMergesAsStrings) {
  json j = small();
  j["model"]["merges"] = json::parse(R"([["a", "b"], ["ab", "c"], ["Ġ", "c"]])");
  EXPECT_EQ(parse(j).merges, parse(small()).merges);
  // Pairs may hold spaces, which the string form cannot.
  j["model"]["vocab"]["a b"] = 8;
  j["model"]["vocab"]["a ba b"] = 9;
  j["model"]["merges"].push_back({"a b", "a b"});
  EXPECT_EQ(parse(j).merges.back().second, "a b");
}

TEST(TokenizerJson, FixtureTokenizer) {
  std::string path = fixture_tokenizer();
  if (path.empty()) GTEST_SKIP() << "fixtures not found (set TANDEM_FIXTURES)";
  TokenizerSpec s = load_tokenizer_json(path);
  EXPECT_EQ(s.source, path);
  EXPECT_EQ(s.model, TokenizerModel::kBPE);
  EXPECT_EQ(s.vocab.size(), 508u);
  EXPECT_EQ(s.n_ids(), 512u);
  EXPECT_EQ(s.merges.size(), 252u);
  EXPECT_EQ(s.merges[0], (std::pair<std::string, std::string>{"Ġ", "t"}));
  EXPECT_EQ(s.duplicate_merges, 0u);
  ASSERT_EQ(s.added_tokens.size(), 4u);
  EXPECT_EQ(s.find("<|im_start|>"), 509u);
  EXPECT_EQ(s.find("<|im_end|>"), 510u);
  EXPECT_EQ(s.find("<|endoftext|>"), 508u);
  for (const auto& t : s.added_tokens) {
    EXPECT_TRUE(t.special) << t.content;
    EXPECT_FALSE(t.normalized) << t.content;
  }
  EXPECT_EQ(s.id_to_token[72], "H");
  EXPECT_EQ(s.id_to_token[32], "Ġ");
  for (uint32_t id = 0; id < s.n_ids(); ++id) EXPECT_FALSE(s.id_to_token[id].empty()) << id;
  EXPECT_FALSE(s.byte_fallback);
  EXPECT_FALSE(s.unk_token.has_value());
  EXPECT_EQ(s.pre_tokenizer["type"], "Sequence");
  EXPECT_EQ(s.decoder["type"], "ByteLevel");
  EXPECT_EQ(s.post_processor["type"], "ByteLevel");
}

TEST(TokenizerJson, FixtureVariants) {
  std::string path = fixture_tokenizer();
  if (path.empty()) GTEST_SKIP() << "fixtures not found (set TANDEM_FIXTURES)";
  std::ifstream in(path);
  const json base = json::parse(in);
  {
    json j = base;  // a special token moved onto a vocab id
    j["added_tokens"][1]["id"] = 72;
    EXPECT_TOKENIZER_ERROR(parse(j),
                           {"added_tokens[1] (\"<|im_start|>\")", "id 72", "also the id of \"H\""});
  }
  {
    json j = base;  // a merge whose result was removed from the vocab
    j["model"]["vocab"].erase("Ġt");
    EXPECT_TOKENIZER_ERROR(parse(j),
                           {"model.merges[0]", "\"Ġ\" + \"t\" makes \"Ġt\"", "not in the vocab"});
  }
  {
    json j = base;  // two vocab entries with one id
    j["model"]["vocab"]["Ġt"] = 101;
    EXPECT_TOKENIZER_ERROR(parse(j), {"model.vocab[", "id 101 is also the id of"});
  }
  {
    json j = base;
    j["model"]["merges"][3] = "er";
    EXPECT_TOKENIZER_ERROR(parse(j), {"model.merges[3]", "\"er\" is not two tokens"});
  }
  {
    json j = base;
    j["model"]["type"] = "SentencePiece";
    EXPECT_TOKENIZER_ERROR(
        parse(j),
        {"model.type \"SentencePiece\" is not supported", "BPE, Unigram, WordPiece, WordLevel"},
        ErrorKind::kUnsupported);
  }
  {
    json j = base;  // the legacy form without "type" is recognised by its merges
    j["model"].erase("type");
    EXPECT_EQ(parse(j).model, TokenizerModel::kBPE);
  }
}

TEST(TokenizerJson, NotJsonOrWrongStructure) {
  EXPECT_TOKENIZER_ERROR(parse_text(""), {"not valid JSON"});
  EXPECT_TOKENIZER_ERROR(parse_text("{\"model\": {"), {"not valid JSON"});
  EXPECT_TOKENIZER_ERROR(parse_text("{\"model\": \"\xff\"}"), {"not valid JSON"});
  EXPECT_TOKENIZER_ERROR(parse_text("[]"), {"the top level must be a JSON object"});
  EXPECT_TOKENIZER_ERROR(parse_text("{}"), {"'model' is missing or not an object"});
  EXPECT_TOKENIZER_ERROR(parse_text(R"({"model": []})"), {"'model' is missing"});
  EXPECT_TOKENIZER_ERROR(parse_text(R"({"model": {"vocab": {"a": 0}}})"),
                         {"model.type is missing"});
  EXPECT_TOKENIZER_ERROR(parse_text(R"({"model": {"type": 3, "vocab": {"a": 0}}})"),
                         {"model.type must be a string, got 3"});
  EXPECT_TOKENIZER_ERROR(parse_text(R"({"model": {"type": "BPE"}})"), {"model.vocab is missing"});
  EXPECT_TOKENIZER_ERROR(parse_text(R"({"model": {"type": "BPE", "vocab": {}}})"),
                         {"model.vocab is empty"});
  EXPECT_TOKENIZER_ERROR(parse_text(R"({"model": {"type": "BPE", "vocab": [["a", 0]]}})"),
                         {"model.vocab must be an object of token: id, got an array"});
  json j = small();
  j["normalizer"] = "NFC";
  EXPECT_TOKENIZER_ERROR(parse(j), {"'normalizer' must be an object or null, got \"NFC\""});
  j = small();
  j["decoder"] = json::array();
  EXPECT_TOKENIZER_ERROR(parse(j), {"'decoder' must be an object or null, got an array"});
}

TEST(TokenizerJson, RepeatedKeysAndDeepNesting) {
  EXPECT_TOKENIZER_ERROR(
      parse_text(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "a": 2}}})"),
      {"model.vocab: key \"a\" appears twice"});
  EXPECT_TOKENIZER_ERROR(
      parse_text(R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "model": {}})"),
      {"top level: key \"model\" appears twice"});
  EXPECT_TOKENIZER_ERROR(
      parse_text(R"({"added_tokens": [{"id": 1, "content": "x"}, {"id": 2, "id": 3}]})"),
      {"added_tokens[1]: key \"id\" appears twice"});
  std::string deep = R"({"normalizer": )" + std::string(100000, '[') + std::string(100000, ']') +
                     R"(, "model": {"type": "BPE", "vocab": {"a": 0}}})";
  EXPECT_TOKENIZER_ERROR(parse_text(deep), {"JSON nests deeper than 64 levels"});
}

TEST(TokenizerJson, BadVocabIds) {
  auto with_vocab = [](const std::string& v) {
    return R"({"model": {"type": "BPE", "vocab": )" + v + "}}";
  };
  EXPECT_TOKENIZER_ERROR(parse_text(with_vocab(R"({"a": 0, "b": -1})")),
                         {"model.vocab[\"b\"]: id -1 is negative"});
  EXPECT_TOKENIZER_ERROR(parse_text(with_vocab(R"({"a": 1.0})")),
                         {"model.vocab[\"a\"]: id must be a non-negative integer, got 1.0"});
  EXPECT_TOKENIZER_ERROR(parse_text(with_vocab(R"({"a": "1"})")), {"got \"1\""});
  EXPECT_TOKENIZER_ERROR(parse_text(with_vocab(R"({"a": null})")), {"got null"});
  EXPECT_TOKENIZER_ERROR(parse_text(with_vocab(R"({"a": 3, "b": 3})")),
                         {"model.vocab[\"b\"]: id 3 is also the id of \"a\""});
  EXPECT_TOKENIZER_ERROR(parse_text(with_vocab(R"({"a": 18446744073709551615})")),
                         {"model.vocab[\"a\"]: id 18446744073709551615 is not below the limit"});
  EXPECT_TOKENIZER_ERROR(parse_text(with_vocab(R"({"": 0})")), {"model.vocab[\"\"]: empty token"});
  // Control characters in a token are escaped in the message.
  EXPECT_TOKENIZER_ERROR(parse_text(with_vocab(R"({"a\n": -5})")),
                         {"model.vocab[\"a\\n\"]: id -5 is negative"});
}

TEST(TokenizerJson, BadMerges) {
  auto with_merges = [](const std::string& m) {
    json j = small();
    j["model"]["merges"] = json::parse(m);
    return j;
  };
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"(["ab"])")),
                         {"model.merges[0]: \"ab\" is not two tokens separated by one space"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"(["a b", "a b c"])")), {"model.merges[1]"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"([" a"])")), {"model.merges[0]"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"(["a  b"])")), {"model.merges[0]"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"([["a"]])")),
                         {"model.merges[0]: expected \"a b\" or [\"a\", \"b\"], got an array"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"([[1, 2]])")), {"model.merges[0]: expected"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"([7])")), {"model.merges[0]: expected", "got 7"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"([["", "a"]])")),
                         {"model.merges[0]: a merge of an empty token"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"(["a x"])")),
                         {"model.merges[0]: \"x\" is not in the vocab"});
  EXPECT_TOKENIZER_ERROR(
      parse(with_merges(R"(["b a"])")),
      {"model.merges[0]: \"b\" + \"a\" makes \"ba\", which is not in the vocab"});
  EXPECT_TOKENIZER_ERROR(parse(with_merges(R"({"a": "b"})")),
                         {"model.merges must be an array, got an object"});
  // A repeated merge keeps its first rank.
  TokenizerSpec s = parse(with_merges(R"(["a b", "ab c", "a b"])"));
  EXPECT_EQ(s.merges.size(), 2u);
  EXPECT_EQ(s.duplicate_merges, 1u);
  // WordPiece-style continuing prefix: the merged token drops b's prefix.
  json j = small();
  j["model"]["continuing_subword_prefix"] = "##";
  j["model"]["vocab"]["##c"] = 8;
  j["model"]["merges"] = json::parse(R"(["ab ##c"])");
  EXPECT_EQ(parse(j).merges[0].second, "##c");
}

TEST(TokenizerJson, BadAddedTokens) {
  auto with_added = [](const std::string& a) {
    json j = small();
    j["added_tokens"] = json::parse(a);
    return j;
  };
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"({"id": 1})")),
                         {"added_tokens must be an array, got an object"});
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([3])")),
                         {"added_tokens[0]: must be an object, got 3"});
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([{"content": "<x>"}])")),
                         {"added_tokens[0]: 'id' is missing"});
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([{"id": 9}])")),
                         {"added_tokens[0]: 'content' is missing or not a string"});
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([{"id": -9, "content": "<x>"}])")),
                         {"added_tokens[0]: id -9 is negative"});
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([{"id": 9, "content": ""}])")),
                         {"added_tokens[0] (\"\"): empty token"});
  // Same text as a vocab entry but another id.
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([{"id": 9, "content": "abc"}])")),
                         {"added_tokens[0] (\"abc\"): has id 9 but the vocab gives it id 4"});
  // An id the vocab gives to another text.
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([{"id": 4, "content": "<x>"}])")),
                         {"added_tokens[0] (\"<x>\"): id 4 is also the id of \"abc\""});
  EXPECT_TOKENIZER_ERROR(
      parse(with_added(R"([{"id": 9, "content": "<x>"}, {"id": 10, "content": "<x>"}])")),
      {"added_tokens[1] (\"<x>\"): the same text as added_tokens[0]"});
  EXPECT_TOKENIZER_ERROR(
      parse(with_added(R"([{"id": 9, "content": "<x>"}, {"id": 9, "content": "<y>"}])")),
      {"added_tokens[1] (\"<y>\"): id 9 is also the id of added_tokens[0]"});
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([{"id": 9, "content": "<x>", "special": "yes"}])")),
                         {"added_tokens[0] (\"<x>\").special must be true or false, got \"yes\""});
  EXPECT_TOKENIZER_ERROR(parse(with_added(R"([{"id": 9, "content": "<x>", "lstrip": 1}])")),
                         {".lstrip must be true or false"});
  // Ids past the vocab leave holes, which are allowed.
  TokenizerSpec s = parse(with_added(R"([{"id": 20, "content": "<x>"}])"));
  EXPECT_EQ(s.n_ids(), 21u);
  EXPECT_TRUE(s.id_to_token[10].empty());
}

TEST(TokenizerJson, ModelOptions) {
  json j = small();
  j["model"]["unk_token"] = "<unk>";
  EXPECT_TOKENIZER_ERROR(parse(j),
                         {"model.unk_token \"<unk>\" is neither in the vocab nor an added token"});
  j["model"]["unk_token"] = 0;
  EXPECT_TOKENIZER_ERROR(parse(j), {"model.unk_token must be a string or null, got 0"});
  j["model"]["unk_token"] = "<|end|>";  // an added token is fine
  EXPECT_EQ(parse(j).unk_token, "<|end|>");
  j = small();
  j["model"]["byte_fallback"] = "true";
  EXPECT_TOKENIZER_ERROR(parse(j), {"model.byte_fallback must be true or false, got \"true\""});
  j["model"]["byte_fallback"] = true;
  EXPECT_TRUE(parse(j).byte_fallback);
  j["model"]["dropout"] = 1.5;
  EXPECT_TOKENIZER_ERROR(parse(j), {"model.dropout must be a number in [0, 1], got 1.5"});
  j["model"]["dropout"] = 0.1;
  EXPECT_DOUBLE_EQ(*parse(j).dropout, 0.1);
}

TEST(TokenizerJson, Limits) {
  TokenizerLimits l;
  l.max_ids = 5;
  EXPECT_TOKENIZER_ERROR(parse(small(), l), {"7 model.vocab entries is more than the limit of 5"});
  l.max_ids = 7;  // 7 entries, but the added token's id 7 is not below 7
  EXPECT_TOKENIZER_ERROR(parse(small(), l), {"added_tokens[0]: id 7 is not below the limit of 7"});
  l = {};
  l.max_merges = 2;
  EXPECT_TOKENIZER_ERROR(parse(small(), l), {"3 model.merges entries is more than the limit of 2"});
  l = {};
  l.max_added = 1;
  EXPECT_TOKENIZER_ERROR(parse(small(), l), {"2 added_tokens is more than the limit of 1"});
  l = {};
  l.max_token_bytes = 2;
  EXPECT_TOKENIZER_ERROR(parse(small(), l), {"token of 3 bytes is longer than the limit of 2"});
  l = {};
  l.max_text_bytes = 100;
  EXPECT_TOKENIZER_ERROR(parse(small(), l), {"is more than the limit of 100"});
  l = {};
  l.max_depth = 1;  // added_tokens[0] is at depth 2
  EXPECT_TOKENIZER_ERROR(parse(small(), l), {"added_tokens: JSON nests deeper than 1 levels"});
}

TEST(TokenizerJson, OtherModelTypes) {
  TokenizerSpec u = parse_text(R"({"model": {"type": "Unigram", "unk_id": 1,
      "vocab": [["<s>", 0.0], ["<unk>", 0.0], ["▁a", -1.5]], "byte_fallback": true}})");
  EXPECT_EQ(u.model, TokenizerModel::kUnigram);
  EXPECT_EQ(u.vocab.at("▁a"), 2u);
  EXPECT_DOUBLE_EQ(u.unigram_scores[2], -1.5);
  EXPECT_EQ(u.unk_token, "<unk>");
  EXPECT_TRUE(u.byte_fallback);
  EXPECT_TOKENIZER_ERROR(
      parse_text(R"({"model": {"type": "Unigram", "vocab": [["a", 0], ["b"]]}})"),
      {"model.vocab[1]: expected [piece, score], got an array"});
  EXPECT_TOKENIZER_ERROR(
      parse_text(R"({"model": {"type": "Unigram", "vocab": [["a", 0], ["a", 1]]}})"),
      {"model.vocab[1]: piece \"a\" appears twice"});
  EXPECT_TOKENIZER_ERROR(
      parse_text(R"({"model": {"type": "Unigram", "unk_id": 5, "vocab": [["a", 0]]}})"),
      {"model.unk_id 5 is not an id of the 1 pieces"});
  EXPECT_TOKENIZER_ERROR(
      parse_text(R"({"model": {"type": "Unigram", "vocab": [["a", 0]], "merges": []}})"),
      {"model.merges given for a Unigram model"});
  TokenizerSpec w = parse_text(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]",
      "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
      "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}})");
  EXPECT_EQ(w.model, TokenizerModel::kWordPiece);
  EXPECT_EQ(w.continuing_subword_prefix, "##");
  EXPECT_EQ(w.model_options["max_input_chars_per_word"], 100);
  EXPECT_EQ(to_string(w.model), std::string("WordPiece"));
  TokenizerSpec wl = parse_text(R"({"model": {"type": "WordLevel", "vocab": {"a": 0}}})");
  EXPECT_EQ(wl.model, TokenizerModel::kWordLevel);
}

TEST(TokenizerJson, LoadErrorsNameThePath) {
  try {
    load_tokenizer_json("/nonexistent/tokenizer.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
  }
  fs::path p = fs::path(::testing::TempDir()) / "tandem_tokenizer_bad.json";
  std::ofstream(p) << R"({"model": {"type": "BPE", "vocab": {"a": -1}}})";
  try {
    load_tokenizer_json(p.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string() + ": model.vocab[\"a\"]: id -1 is negative"),
              std::string::npos)
        << e.what();
  }
  std::ofstream(p, std::ios::trunc).flush();  // empty file
  try {
    load_tokenizer_json(p.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

}  // namespace
}  // namespace tandem
