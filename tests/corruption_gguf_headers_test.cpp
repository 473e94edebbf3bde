// Corruption suite, GGUF part 2: hand-made files with each kind of lie a
// header can tell (counts, strings, arrays, alignment, tensor infos, offsets,
// metadata the model mapping reads). Every case must end in a tandem::Error
// whose message names the file and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "common/formats/gguf.h"
#include "common/formats/writers.h"
#include "common/model/config.h"
#include "common/model/model_source.h"
#include "common/model/tensor_map.h"
#include "tests/corruption_util.h"

namespace tandem::testing {
namespace {
namespace fs = std::filesystem;

constexpr const char* kLabel = "bad.gguf";

GgufFile parse(std::span<const std::byte> b) {
  return GgufFile::parse(b, kLabel);
}

// ---- hand-made headers ----------------------------------------------------

TEST(GgufCorruption, BadMagicVersionAndEndianness) {
  RawGguf bad;
  bad.raw("GGUX").u32(3).u64(0).u64(0);
  EXPECT_TANDEM_ERROR(parse(bad.bytes()), {kLabel, "not a GGUF file (bad magic)"});
  RawGguf ggml;  // a pre-GGUF ggml file
  ggml.raw("lmgg").u32(1).u64(0).u64(0);
  EXPECT_TANDEM_ERROR(parse(ggml.bytes()), {kLabel, "bad magic"});
  RawGguf v1;
  v1.header(0, 0, 1);
  EXPECT_TANDEM_ERROR(parse(v1.bytes()), {kLabel, "version 1 is obsolete"},
                      ErrorKind::kUnsupported);
  RawGguf v4;
  v4.header(0, 0, 4);
  EXPECT_TANDEM_ERROR(parse(v4.bytes()), {kLabel, "unknown GGUF version 4", "supported: 2, 3"});
  RawGguf big;  // a big-endian v3 file: version and counts byte-swapped
  big.raw("GGUF").u32(0x03000000u).u64(0).u64(0);
  EXPECT_TANDEM_ERROR(parse(big.bytes()), {kLabel, "big-endian"}, ErrorKind::kUnsupported);
  RawGguf big2;
  big2.raw("GGUF").u32(0x02000000u).u64(0).u64(0);
  EXPECT_TANDEM_ERROR(parse(big2.bytes()), {kLabel, "big-endian"});
  // Version 2 is read (same layout as 3 for little-endian files).
  RawGguf v2;
  v2.header(0, 1, 2).kv_u32("a", 1);
  EXPECT_EQ(parse(v2.bytes()).version(), 2u);
  EXPECT_TANDEM_ERROR(parse({}), {kLabel, "truncated while reading magic"});
}

TEST(GgufCorruption, ImpossibleCounts) {
  RawGguf t;
  t.header(uint64_t{1} << 40, 0).zeros(64);
  EXPECT_TANDEM_ERROR(parse(t.bytes()), {kLabel, "claims 1099511627776 tensors"});
  RawGguf k;
  k.header(0, std::numeric_limits<uint64_t>::max()).zeros(64);
  EXPECT_TANDEM_ERROR(parse(k.bytes()), {kLabel, "metadata entries, impossible"});
  RawGguf k2;  // a plausible count, but more than the bytes left
  k2.header(0, 3).kv_u32("a", 1);
  EXPECT_TANDEM_ERROR(parse(k2.bytes()), {kLabel, "claims 3 metadata entries"});
}

TEST(GgufCorruption, OversizedAndTruncatedStrings) {
  RawGguf key;
  key.header(0, 1).u64(uint64_t{1} << 40).raw("abc").zeros(16);
  EXPECT_TANDEM_ERROR(parse(key.bytes()),
                      {kLabel, "metadata key #0 has length 1099511627776", "more than the limit"});
  RawGguf val;
  val.header(0, 1).kv("k.s", GgufType::kString).u64(uint64_t{1} << 33).raw("abcd");
  EXPECT_TANDEM_ERROR(parse(val.bytes()),
                      {kLabel, "k.s has length 8589934592", "more than the limit 67108864"});
  RawGguf wrap;  // a length that would wrap a pointer
  wrap.header(0, 1).kv("k.s", GgufType::kString).u64(std::numeric_limits<uint64_t>::max() - 3);
  EXPECT_TANDEM_ERROR(parse(wrap.bytes()), {kLabel, "k.s has length", "more than the limit"});
  RawGguf cut;
  cut.header(0, 1).kv("k.s", GgufType::kString).u64(100).raw("abcd").zeros(9);
  EXPECT_TANDEM_ERROR(parse(cut.bytes()),
                      {kLabel, "truncated while reading k.s", "need 100 bytes"});
  RawGguf name;
  name.header(1, 0).u64(uint64_t{1} << 20).zeros(64);
  EXPECT_TANDEM_ERROR(parse(name.bytes()), {kLabel, "name of tensor #0 has length 1048576"});
  RawGguf empty_key;
  empty_key.header(0, 1).str("").u32(4).u32(1);
  EXPECT_TANDEM_ERROR(parse(empty_key.bytes()), {kLabel, "metadata key #0 is empty"});
}

TEST(GgufCorruption, DuplicateKeysAndUnknownValueTypes) {
  RawGguf dup;
  dup.header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
  EXPECT_TANDEM_ERROR(parse(dup.bytes()), {kLabel, "metadata key 'a.b' appears twice"});
  RawGguf unk;
  unk.header(0, 1).kv("a.b", GgufType(13)).u64(0);
  EXPECT_TANDEM_ERROR(parse(unk.bytes()), {kLabel, "'a.b' has unknown value type 13"});
  RawGguf unk2;
  unk2.header(0, 1).kv("a.b", GgufType(0xFFFFFFFFu)).u64(0);
  EXPECT_TANDEM_ERROR(parse(unk2.bytes()), {kLabel, "unknown value type 4294967295"});
  RawGguf unk_elem;
  unk_elem.header(0, 1).kv("a.arr", GgufType::kArray).u32(99).u64(1).u64(0);
  EXPECT_TANDEM_ERROR(parse(unk_elem.bytes()),
                      {kLabel, "'a.arr' is an array of unknown value type 99"});
  RawGguf boolean;
  boolean.header(0, 1).kv("a.flag", GgufType::kBool).u8(2).zeros(8);
  EXPECT_TANDEM_ERROR(parse(boolean.bytes()), {kLabel, "'a.flag' has bool value 2"});
}

TEST(GgufCorruption, OversizedAndNestedArrays) {
  RawGguf huge;
  huge.header(0, 1)
      .kv("a.arr", GgufType::kArray)
      .u32(uint32_t(GgufType::kU8))
      .u64(uint64_t{1} << 60)
      .zeros(64);
  EXPECT_TANDEM_ERROR(parse(huge.bytes()),
                      {kLabel, "'a.arr' is an array of 1152921504606846976 elements", "limit"});
  RawGguf more;  // fewer bytes than elements
  more.header(0, 1).kv("a.arr", GgufType::kArray).u32(uint32_t(GgufType::kU32)).u64(1000).zeros(40);
  EXPECT_TANDEM_ERROR(
      parse(more.bytes()),
      {kLabel, "'a.arr' claims 1000 array elements of type u32", "40 bytes remain"});
  RawGguf strs;  // strings: each needs at least its 8-byte length
  strs.header(0, 1)
      .kv("a.strs", GgufType::kArray)
      .u32(uint32_t(GgufType::kString))
      .u64(100)
      .zeros(64);
  EXPECT_TANDEM_ERROR(parse(strs.bytes()),
                      {kLabel, "'a.strs' claims 100 array elements of type string"});
  // Depth: arrays of arrays, five deep (the limit is four).
  RawGguf deep;
  deep.header(0, 1).kv("a.deep", GgufType::kArray);
  for (int d = 0; d < 5; ++d) deep.u32(uint32_t(GgufType::kArray)).u64(1);
  deep.u32(uint32_t(GgufType::kU8)).u64(1).u8(0);
  EXPECT_TANDEM_ERROR(parse(deep.bytes()), {kLabel, "'a.deep' nests arrays deeper than 4"});
  // Four deep is fine.
  RawGguf ok;
  ok.header(0, 1).kv("a.deep", GgufType::kArray);
  for (int d = 0; d < 3; ++d) ok.u32(uint32_t(GgufType::kArray)).u64(1);
  ok.u32(uint32_t(GgufType::kU8)).u64(1).u8(5);
  EXPECT_NO_THROW(parse(ok.bytes()));
}

TEST(GgufCorruption, AlignmentKey) {
  auto with_alignment = [](auto put) {
    RawGguf g;
    g.header(1, 1).str("general.alignment");
    put(g);
    g.tensor("t", {4}, 0, 0).pad(64).zeros(16);
    return g;
  };
  auto not_pow2 = with_alignment([](RawGguf& g) { g.u32(uint32_t(GgufType::kU32)).u32(48); });
  EXPECT_TANDEM_ERROR(parse(not_pow2.bytes()),
                      {kLabel, "general.alignment = 48 is not a power of two"});
  auto zero = with_alignment([](RawGguf& g) { g.u32(uint32_t(GgufType::kU32)).u32(0); });
  EXPECT_TANDEM_ERROR(parse(zero.bytes()), {kLabel, "general.alignment = 0"});
  auto huge = with_alignment([](RawGguf& g) { g.u32(uint32_t(GgufType::kU32)).u32(1u << 31); });
  EXPECT_TANDEM_ERROR(parse(huge.bytes()),
                      {kLabel, "general.alignment = 2147483648", "up to 1 MiB"});
  auto u64 = with_alignment([](RawGguf& g) { g.u32(uint32_t(GgufType::kU64)).u64(32); });
  EXPECT_TANDEM_ERROR(parse(u64.bytes()), {kLabel, "general.alignment must be a u32 (found u64)"});
  auto str = with_alignment([](RawGguf& g) { g.u32(uint32_t(GgufType::kString)).str("32"); });
  EXPECT_TANDEM_ERROR(parse(str.bytes()), {kLabel, "must be a u32 (found string)"});
  auto good = with_alignment([](RawGguf& g) { g.u32(uint32_t(GgufType::kU32)).u32(64); });
  EXPECT_EQ(parse(good.bytes()).alignment(), 64u);
}

// One tensor info after a header without metadata, then padding and data.
RawGguf one_tensor(std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data = 64) {
  RawGguf g;
  g.header(1, 0).tensor("blk.0.w", std::move(ne), type, offset).pad(32).zeros(data);
  return g;
}

TEST(GgufCorruption, TensorInfoFields) {
  EXPECT_NO_THROW(parse(one_tensor({16}, 0, 0).bytes()));
  EXPECT_TANDEM_ERROR(parse(one_tensor({}, 0, 0).bytes()),
                      {kLabel, "'blk.0.w' has 0 dimensions (must be 1..4)"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({1, 1, 1, 1, 1}, 0, 0).bytes()),
                      {kLabel, "'blk.0.w' has 5 dimensions"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({4, 0}, 0, 0).bytes()),
                      {kLabel, "'blk.0.w' has a zero dimension"});
  RawGguf many_dims;  // a dimension count that would make the reader loop for long
  many_dims.header(1, 0).str("blk.0.w").u32(0xFFFFFFFFu).zeros(64);
  EXPECT_TANDEM_ERROR(parse(many_dims.bytes()), {kLabel, "4294967295 dimensions"});
  RawGguf empty;
  empty.header(1, 0).tensor("", {4}, 0, 0).pad(32).zeros(16);
  EXPECT_TANDEM_ERROR(parse(empty.bytes()), {kLabel, "tensor #0 has an empty name"});
}

TEST(GgufCorruption, UnknownTensorTypes) {
  EXPECT_TANDEM_ERROR(parse(one_tensor({256}, 16, 0).bytes()),
                      {kLabel, "'blk.0.w' has GGML type 16 (IQ2_XXS)", "supported: F32", "Q4_K"},
                      ErrorKind::kUnsupported);
  EXPECT_TANDEM_ERROR(parse(one_tensor({32}, 3, 0).bytes()), {kLabel, "type 3 (Q4_1)"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({32}, 4, 0).bytes()), {kLabel, "Q4_2(removed)"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({32}, 39, 0).bytes()), {kLabel, "type 39 (MXFP4)"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({32}, 1000, 0).bytes()), {kLabel, "type 1000 (unknown)"});
}

TEST(GgufCorruption, RowsNotWholeBlocks) {
  EXPECT_TANDEM_ERROR(
      parse(one_tensor({100, 2}, 12, 0, 512).bytes()),
      {kLabel, "'blk.0.w' row length 100 is not a multiple of the q4_k block size 256"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({33}, 8, 0).bytes()),
                      {kLabel, "row length 33", "q8_0 block size 32"});
  // The check is per row: 2 rows of 128 are 256 values but not whole rows of blocks.
  EXPECT_TANDEM_ERROR(parse(one_tensor({128, 2}, 12, 0, 512).bytes()), {kLabel, "row length 128"});
}

TEST(GgufCorruption, OverflowingShapesAndOffsets) {
  // ne product overflows 64 bits.
  EXPECT_TANDEM_ERROR(parse(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0).bytes()),
                      {kLabel, "'blk.0.w' element count overflows"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({3, uint64_t{1} << 62}, 0, 0).bytes()),
                      {kLabel, "'blk.0.w' element count overflows"});
  // Element count fits but the byte size (x4 for f32) does not.
  EXPECT_TANDEM_ERROR(parse(one_tensor({uint64_t{1} << 62}, 0, 0).bytes()),
                      {kLabel, "'blk.0.w' byte size overflows"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({uint64_t{1} << 61, 3}, 0, 0).bytes()),
                      {kLabel, "'blk.0.w' byte size overflows"});
  // A huge but plausible size.
  EXPECT_TANDEM_ERROR(
      parse(one_tensor({uint64_t{1} << 40}, 0, 0).bytes()),
      {kLabel, "'blk.0.w' (4398046511104 bytes at data offset 0) extends past the end"});
  // Offsets near 2^64 (aligned) and offset + size wrapping around.
  const uint64_t top = std::numeric_limits<uint64_t>::max() & ~uint64_t{31};
  EXPECT_TANDEM_ERROR(parse(one_tensor({16}, 0, top).bytes()),
                      {kLabel, "'blk.0.w'", "extends past the end of the file"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({16}, 0, top - 32).bytes()), {kLabel, "past the end"});
  EXPECT_TANDEM_ERROR(parse(one_tensor({16}, 0, 32, 64).bytes()),
                      {kLabel, "'blk.0.w' (64 bytes at data offset 32) extends past the end",
                       "data section holds 64 bytes"});
  // Just fits.
  EXPECT_NO_THROW(parse(one_tensor({8}, 0, 32, 64).bytes()));
}

TEST(GgufCorruption, MisalignedOffsets) {
  EXPECT_TANDEM_ERROR(parse(one_tensor({4}, 0, 4).bytes()),
                      {kLabel, "'blk.0.w' offset 4 is not aligned to 32"});
  RawGguf g;  // alignment 64 from the header applies to the offsets too
  g.header(1, 1).kv_u32("general.alignment", 64).tensor("t", {4}, 0, 32).pad(64).zeros(128);
  EXPECT_TANDEM_ERROR(parse(g.bytes()), {kLabel, "'t' offset 32 is not aligned to 64"});
}

TEST(GgufCorruption, OverlappingAndDuplicateTensors) {
  RawGguf overlap;
  overlap.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad(32).zeros(128);
  EXPECT_TANDEM_ERROR(parse(overlap.bytes()), {kLabel, "tensors 'a' and 'b' overlap"});
  RawGguf same;
  same.header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 0).pad(32).zeros(64);
  EXPECT_TANDEM_ERROR(parse(same.bytes()), {kLabel, "overlap in the data section"});
  RawGguf dup;
  dup.header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad(32).zeros(64);
  EXPECT_TANDEM_ERROR(parse(dup.bytes()), {kLabel, "tensor name 'a' appears twice"});
  RawGguf adjacent;  // touching is fine
  adjacent.header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 32).pad(32).zeros(64);
  EXPECT_NO_THROW(parse(adjacent.bytes()));
}

TEST(GgufCorruption, DataSectionBeyondTheFile) {
  RawGguf g;  // infos end unaligned; the padding to the data section is missing
  g.header(1, 0).tensor("abc", {4}, 0, 0);
  ASSERT_NE(g.size() % 32, 0u);
  EXPECT_TANDEM_ERROR(parse(g.bytes()), {kLabel, "truncated: data section would start at"});
}

// ---- metadata the model mapping reads -------------------------------------

TEST(GgufCorruption, ModelMetadataOfWrongTypeOrRange) {
  auto with = [](const std::string& key, GgufValue v) {
    GgufWriter w;
    auto bytes = tiny_qwen3moe_gguf();
    GgufFile f = GgufFile::parse(bytes, "x");
    for (const auto& [k, val] : f.metadata()) w.set(k, k == key ? v : val);
    if (!f.find(key)) w.set(key, v);
    for (const auto& t : f.tensors())
      w.add_tensor(t.name, t.dtype, t.shape, std::vector<std::byte>(t.data.begin(), t.data.end()));
    return w.to_bytes();
  };
  auto load = [](std::span<const std::byte> b) {
    GgufFile f = GgufFile::parse(b, kLabel);
    ModelConfig c = config_from_gguf(f);
    TensorMap::from_gguf(c, f);
  };
  EXPECT_TANDEM_ERROR(load(with("general.architecture", {GgufType::kString, std::string("gpt2")})),
                      {kLabel, "GGUF architecture 'gpt2' is not supported", "qwen3_moe"},
                      ErrorKind::kUnsupported);
  EXPECT_TANDEM_ERROR(load(with("general.architecture", {GgufType::kU32, uint64_t{1}})),
                      {kLabel, "general.architecture' should be a string but is u32"});
  EXPECT_TANDEM_ERROR(load(with("qwen3moe.block_count", {GgufType::kString, std::string("1")})),
                      {kLabel, "'qwen3moe.block_count' should be an integer but is string"});
  EXPECT_TANDEM_ERROR(load(with("qwen3moe.block_count", {GgufType::kI32, int64_t{-1}})),
                      {kLabel, "'qwen3moe.block_count' is negative"});
  EXPECT_TANDEM_ERROR(load(with("qwen3moe.block_count", {GgufType::kU64, uint64_t{1} << 33})),
                      {kLabel, "'qwen3moe.block_count' = 8589934592 is out of range"});
  EXPECT_TANDEM_ERROR(load(with("qwen3moe.expert_used_count", {GgufType::kU32, uint64_t{3}})),
                      {kLabel, "inconsistent config", "top-k 3", "2 experts"});
  EXPECT_TANDEM_ERROR(load(with("qwen3moe.attention.head_count", {GgufType::kU32, uint64_t{0}})),
                      {kLabel, "qwen3moe.attention.head_count is 0"});
  // Two layers declared, one present: the missing tensor is named.
  EXPECT_TANDEM_ERROR(load(with("qwen3moe.block_count", {GgufType::kU32, uint64_t{2}})),
                      {kLabel, "tensor 'blk.1.attn_norm.weight' is missing"}, ErrorKind::kNotFound);
  // A head size that disagrees with the stored q projection.
  EXPECT_TANDEM_ERROR(load(with("qwen3moe.attention.key_length", {GgufType::kU32, uint64_t{2}})),
                      {kLabel, "'blk.0.attn_q.weight' has shape [8, 8]", "[4, 8]"});
  // Absurd layer counts are refused before anything is sized from them.
  EXPECT_TANDEM_ERROR(load(with("qwen3moe.block_count", {GgufType::kU32, uint64_t{4000000000}})),
                      {kLabel, "4000000000 layers"});
}

}  // namespace
}  // namespace tandem::testing
