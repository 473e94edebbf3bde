// Corruption suite, safetensors part: lying headers of one file and broken
// sharded checkpoints (index and shards disagreeing).
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <random>

#include "common/formats/safetensors.h"
#include "common/formats/writers.h"
#include "tests/corruption_util.h"

namespace tandem::testing {
namespace {
namespace fs = std::filesystem;

constexpr const char* kLabel = "bad.safetensors";

SafetensorsFile parse(std::span<const std::byte> b) {
  return SafetensorsFile::parse(b, kLabel);
}

// A header with one F32 tensor "w" of 2 elements, data_offsets [0, 8].
std::string one(const std::string& dtype = "\"F32\"", const std::string& shape = "[2]",
                const std::string& offsets = "[0, 8]") {
  return R"({"w": {"dtype": )" + dtype + R"(, "shape": )" + shape + R"(, "data_offsets": )" +
         offsets + "}}";
}

TEST(SafetensorsCorruption, Baseline) {
  SafetensorsFile f = parse(raw_safetensors(one(), 8));
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.find("w")->data.size(), 8u);
}

TEST(SafetensorsCorruption, HeaderLength) {
  EXPECT_TANDEM_ERROR(parse({}), {kLabel, "truncated while reading header length"});
  std::vector<std::byte> short_len(5);
  EXPECT_TANDEM_ERROR(parse(short_len), {kLabel, "truncated while reading header length"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one(), 8, 10000)),
                      {kLabel, "truncated while reading JSON header", "need 10000 bytes"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one(), 8, 200ull << 20)),
                      {kLabel, "header length 209715200 exceeds the limit of 104857600 bytes"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one(), 8, std::numeric_limits<uint64_t>::max())),
                      {kLabel, "header length 18446744073709551615 exceeds the limit"});
  // A header length that cuts the JSON short.
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one(), 8, 20)), {kLabel, "not valid JSON"});
}

TEST(SafetensorsCorruption, HeaderNotJsonOrNotObject) {
  EXPECT_TANDEM_ERROR(parse(raw_safetensors("hello", 0)), {kLabel, "header is not valid JSON"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors("", 0)), {kLabel, "not valid JSON"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(std::string("{\"a\":\0}", 7), 0)),
                      {kLabel, "not valid JSON"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors("[1, 2]", 0)),
                      {kLabel, "header must be a JSON object"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors("\"w\"", 0)), {kLabel, "must be a JSON object"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(R"({"w": [1]})", 0)),
                      {kLabel, "tensor 'w' entry must be an object"});
  EXPECT_TANDEM_ERROR(
      parse(raw_safetensors(R"({"": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}})", 4)),
      {kLabel, "a tensor has an empty name"});
  // Invalid UTF-8 in a name.
  EXPECT_TANDEM_ERROR(parse(raw_safetensors("{\"\xff\": 1}", 0)), {kLabel, "not valid JSON"});
  // Deep nesting is parsed without recursion and reported, not a stack overflow.
  std::string deep = R"({"w": {"dtype": "F32", "shape": [)" + std::string(200000, '[') +
                     std::string(200000, ']') + R"(], "data_offsets": [0, 4]}})";
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(deep, 4)),
                      {kLabel, "header nests JSON deeper than 64 levels"});
  std::string deep_meta =
      R"({"__metadata__": {"x": )" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(deep_meta, 0)), {kLabel, "deeper than 64 levels"});
  // Shallow structure where a number belongs is named by its type only.
  EXPECT_TANDEM_ERROR(
      parse(raw_safetensors(one("\"F32\"", "[[[2]]]"), 8)),
      {kLabel, "tensor 'w': shape entry must be a non-negative integer, got [[2]]"});
}

TEST(SafetensorsCorruption, MissingFields) {
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8)),
                      {kLabel, "tensor 'w' has no dtype string"});
  EXPECT_TANDEM_ERROR(
      parse(raw_safetensors(R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", 8)),
      {kLabel, "tensor 'w' has no shape array"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(R"({"w": {"dtype": "F32", "shape": [2]}})", 8)),
                      {kLabel, "tensor 'w' needs data_offsets [begin, end]"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2]", "[0]"), 8)),
                      {kLabel, "tensor 'w' needs data_offsets"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2]", "{\"a\": 0, \"b\": 8}"), 8)),
                      {kLabel, "tensor 'w' needs data_offsets"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "2"), 8)),
                      {kLabel, "tensor 'w' has no shape array"});
}

TEST(SafetensorsCorruption, WrongDtypes) {
  EXPECT_TANDEM_ERROR(
      parse(raw_safetensors(one("\"F64\"", "[1]"), 8)),
      {kLabel, "tensor 'w' has dtype F64, which Tandem does not read", "supported: F32"},
      ErrorKind::kUnsupported);
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F8_E5M2\"", "[8]"), 8)),
                      {kLabel, "dtype F8_E5M2", "F8_E4M3"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"f32\""), 8)), {kLabel, "dtype f32"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"\""), 8)), {kLabel, "tensor 'w' has dtype"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("4"), 8)),
                      {kLabel, "tensor 'w' has no dtype string"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("null"), 8)), {kLabel, "no dtype string"});
}

TEST(SafetensorsCorruption, BadShapes) {
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[-2]"), 8)),
                      {kLabel, "tensor 'w': shape entry must be a non-negative integer, got -2"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2.0]"), 8)),
                      {kLabel, "shape entry must be a non-negative integer, got 2.0"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[1.5]"), 8)), {kLabel, "got 1.5"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[\"2\"]"), 8)), {kLabel, "got \"2\""});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[1e300]"), 8)),
                      {kLabel, "shape entry"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[1,1,1,1,1,1,1,1,1]"), 8)),
                      {kLabel, "tensor 'w' has 9 dimensions"});
  // Element counts that overflow.
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[4294967296, 4294967296]"), 8)),
                      {kLabel, "tensor 'w' element count overflows"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[18446744073709551615]"), 8)),
                      {kLabel, "element count overflows"});
  // A zero dimension is a legal empty tensor.
  EXPECT_NO_THROW(parse(raw_safetensors(one("\"F32\"", "[0, 5]", "[0, 0]"), 0)));
}

TEST(SafetensorsCorruption, BadOffsets) {
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2]", "[8, 0]"), 8)),
                      {kLabel, "tensor 'w' data_offsets [8, 0] are reversed"});
  EXPECT_TANDEM_ERROR(
      parse(raw_safetensors(one("\"F32\"", "[2]", "[0, 8]"), 4)),
      {kLabel, "tensor 'w' data [0, 8) extends past the end of the file", "holds 4 bytes"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2]", "[8, 16]"), 8)),
                      {kLabel, "past the end"});
  EXPECT_TANDEM_ERROR(
      parse(raw_safetensors(one("\"F32\"", "[2]", "[18446744073709551608, 18446744073709551615]"),
                            8)),
      {kLabel, "tensor 'w'", "past the end"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2]", "[0, 18446744073709551616]"), 8)),
                      {kLabel, "data_offsets[1] must be a non-negative integer"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2]", "[-8, 0]"), 8)),
                      {kLabel, "data_offsets[0] must be a non-negative integer, got -8"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2]", "[0, 8.5]"), 8)),
                      {kLabel, "data_offsets[1] must be a non-negative integer, got 8.5"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"F32\"", "[2]", "[0, 12]"), 12)),
                      {kLabel, "tensor 'w' has 12 bytes but shape [2] of f32 needs 8"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(one("\"BF16\"", "[3, 3]", "[0, 8]"), 8)),
                      {kLabel, "has 8 bytes but shape [3,3] of bf16 needs 18"});
}

TEST(SafetensorsCorruption, OverlapsAndDuplicates) {
  std::string overlap =
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(overlap, 12)),
                      {kLabel, "tensors 'a' and 'b' overlap in the data section"});
  std::string same =
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})";
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(same, 8)), {kLabel, "overlap"});
  std::string dup =
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})";
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(dup, 16)),
                      {kLabel, "tensor name 'a' appears twice in the header"});
  // Repeated keys inside an entry are not tensor names.
  std::string inner =
      R"({"a": {"dtype": "F32", "dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  EXPECT_NO_THROW(parse(raw_safetensors(inner, 8)));
  // Empty tensors at the same offset do not overlap anything.
  std::string empties =
      R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  EXPECT_NO_THROW(parse(raw_safetensors(empties, 8)));
}

TEST(SafetensorsCorruption, Metadata) {
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(R"({"__metadata__": {"format": 1}})", 0)),
                      {kLabel, "__metadata__['format'] must be a string"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(R"({"__metadata__": {"x": {"y": "z"}}})", 0)),
                      {kLabel, "__metadata__['x'] must be a string"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(R"({"__metadata__": {"x": null}})", 0)),
                      {kLabel, "__metadata__['x'] must be a string"});
  EXPECT_TANDEM_ERROR(parse(raw_safetensors(R"({"__metadata__": ["pt"]})", 0)),
                      {kLabel, "__metadata__ must be an object"});
  SafetensorsFile ok = parse(raw_safetensors(R"({"__metadata__": {"format": "pt"}})", 0));
  EXPECT_EQ(ok.metadata().at("format"), "pt");
}

TEST(SafetensorsCorruption, TruncationAndFlipsOfAWrittenFile) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add_tensor("a.weight", DType::kBF16, {4, 8}, std::vector<std::byte>(64));
  w.add_tensor("b.weight", DType::kF8E4M3, {3, 5}, std::vector<std::byte>(15));
  w.add_tensor("b.weight_scale_inv", DType::kF32, {1, 1}, std::vector<std::byte>(4));
  auto bytes = w.to_bytes();
  ASSERT_NO_THROW(parse(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    ExactBuffer cut{std::span(bytes).first(n)};
    ASSERT_TRUE(ThrowsErrorAnyOf(
        [&] { parse(cut.span()); },
        {{kLabel, "truncated"}, {kLabel, "not valid JSON"}, {kLabel, "past the end"}}))
        << "cut at " << n;
  }
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  std::mt19937 rng(99);
  for (int iter = 0; iter < 3000; ++iter) {
    auto m = bytes;
    int k = 1 + int(rng() % 4);
    for (int j = 0; j < k; ++j) m[rng() % (8 + header_len)] = std::byte(rng() & 0xFF);
    ExactBuffer buf(m);
    try {
      SafetensorsFile f = parse(buf.span());
      for (const auto& t : f.tensors()) {
        ASSERT_GE(t.data.data(), buf.data.get());
        ASSERT_LE(t.data.data() + t.data.size(), buf.data.get() + buf.size);
        ASSERT_EQ(t.data.size(), *bytes_for(t.dtype, t.n_elems));
      }
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find(kLabel), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      FAIL() << "iteration " << iter << ": unrelated exception " << e.what();
    }
  }
}

// ---- sharded checkpoints --------------------------------------------------

class ShardedCorruption : public ::testing::Test {
 protected:
  ShardedCorruption() : dir_("sharded") {}

  void write_shard(const std::string& file, const std::vector<std::string>& tensors) {
    SafetensorsWriter w;
    for (auto& t : tensors) w.add_tensor(t, DType::kF32, {2}, std::vector<std::byte>(8));
    w.write(dir_ / file);
  }
  void write_index(const std::string& json) { write_text(index(), json); }
  std::string index() const { return dir_ / "model.safetensors.index.json"; }
  std::string shard(int i) const {
    return dir_ / ("model-0000" + std::to_string(i) + "-of-00002.safetensors");
  }
  SafetensorsModel open() { return SafetensorsModel::open_dir(dir_.path()); }

  // Two good shards: x, y in the first, z in the second.
  void good() {
    write_shard("model-00001-of-00002.safetensors", {"x", "y"});
    write_shard("model-00002-of-00002.safetensors", {"z"});
    write_index(R"({"metadata": {}, "weight_map": {
        "x": "model-00001-of-00002.safetensors", "y": "model-00001-of-00002.safetensors",
        "z": "model-00002-of-00002.safetensors"}})");
  }

  TempDir dir_;
};

TEST_F(ShardedCorruption, Baseline) {
  good();
  SafetensorsModel m = open();
  EXPECT_EQ(m.files().size(), 2u);
  EXPECT_EQ(m.tensors().size(), 3u);
}

TEST_F(ShardedCorruption, MissingShard) {
  good();
  fs::remove(shard(2));
  EXPECT_TANDEM_ERROR(
      open(),
      {index(), "shard 'model-00002-of-00002.safetensors' is missing", "holds 1 tensors, e.g. 'z'"},
      ErrorKind::kNotFound);
}

TEST_F(ShardedCorruption, TensorInIndexButNotInShard) {
  good();
  write_shard("model-00002-of-00002.safetensors", {"other"});
  write_index(R"({"weight_map": {"x": "model-00001-of-00002.safetensors",
      "y": "model-00001-of-00002.safetensors", "z": "model-00002-of-00002.safetensors",
      "other": "model-00002-of-00002.safetensors"}})");
  EXPECT_TANDEM_ERROR(open(),
                      {shard(2), "tensor 'z' is listed in the index but not present in the shard"});
}

TEST_F(ShardedCorruption, TensorInShardButNotInIndex) {
  good();
  write_shard("model-00002-of-00002.safetensors", {"z", "stray"});
  EXPECT_TANDEM_ERROR(open(), {shard(2), "tensor 'stray' is not listed in", index()});
}

TEST_F(ShardedCorruption, SameTensorInTwoShards) {
  good();
  write_shard("model-00002-of-00002.safetensors", {"z", "x"});
  EXPECT_TANDEM_ERROR(open(), {shard(2), "tensor 'x' also appears in", shard(1)});
}

TEST_F(ShardedCorruption, WeightMapEscapingTheDirectory) {
  good();
  for (const char* bad : {"../x.safetensors", "/etc/passwd", "sub/x.safetensors", "..", ".", ""}) {
    write_index(std::string(R"({"weight_map": {"x": ")") + bad + R"("}})");
    EXPECT_TANDEM_ERROR(open(), {index(), "weight_map['x'] names '" + std::string(bad) + "'",
                                 "not a file in the directory"});
  }
  write_index(R"({"weight_map": {"x": 7}})");
  EXPECT_TANDEM_ERROR(open(), {index(), "weight_map['x'] must be a file name"});
}

TEST_F(ShardedCorruption, InvalidIndex) {
  good();
  write_index(R"({"weight_map": {"x": "model-00001)");
  EXPECT_TANDEM_ERROR(open(), {index(), "not valid JSON"});
  write_index("");
  EXPECT_TANDEM_ERROR(open(), {index(), "not valid JSON"});
  write_index(R"([1, 2])");
  EXPECT_TANDEM_ERROR(open(), {index(), "missing the weight_map object"});
  write_index(R"({"metadata": {}})");
  EXPECT_TANDEM_ERROR(open(), {index(), "missing the weight_map object"});
  write_index(R"({"weight_map": []})");
  EXPECT_TANDEM_ERROR(open(), {index(), "missing the weight_map object"});
  write_index(R"({"weight_map": {}})");
  EXPECT_TANDEM_ERROR(open(), {index(), "weight_map is empty"});
}

TEST_F(ShardedCorruption, CorruptShardIsNamed) {
  good();
  fs::resize_file(shard(2), 20);
  EXPECT_TANDEM_ERROR(open(), {shard(2), "truncated while reading JSON header"});
  fs::resize_file(shard(2), 0);
  EXPECT_TANDEM_ERROR(open(), {shard(2), "truncated while reading header length"});
}

TEST(SafetensorsDirCorruption, NoModelFiles) {
  TempDir dir("empty_model_dir");
  EXPECT_TANDEM_ERROR(SafetensorsModel::open_dir(dir.path()),
                      {dir.path(), "no model.safetensors or model.safetensors.index.json"},
                      ErrorKind::kNotFound);
  fs::create_directory(dir / "model.safetensors");
  EXPECT_TANDEM_ERROR(SafetensorsModel::open_dir(dir.path()),
                      {dir / "model.safetensors", "is not a regular file"});
}

}  // namespace
}  // namespace tandem::testing
