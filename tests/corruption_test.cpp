// Corruption suite, GGUF part: truncations at every header boundary and every
// byte, flipped bytes, and hand-made files with each kind of lie a header can
// tell. Every case must end in a tandem::Error whose message names the file
// and the problem; never a crash, a hang or another exception type.
// (Safetensors and model-level cases are in corruption_*_test.cpp.)
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

// Where a field starts and the name the reader gives it in messages, found by
// walking the file independently of the reader.
struct Boundary {
  size_t offset;
  std::string field;  // "" for "inside the data section"
  // Arrays enclosing the field: {count, smallest element size, offset after the count}.
  std::vector<std::array<uint64_t, 3>> arrays;
};

class GgufWalker {
 public:
  explicit GgufWalker(std::span<const std::byte> b) : b_(b) {}

  std::vector<Boundary> walk() {
    mark("magic");
    p_ += 4;
    mark("version");
    p_ += 4;
    mark("tensor count");
    n_tensors_ = u64();
    mark("metadata count");
    n_kv_ = u64();
    for (uint64_t i = 0; i < n_kv_; ++i) {
      std::string key = str("metadata key #" + std::to_string(i));
      mark(key + " (value type)");
      value(u32(), key);
    }
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      std::string name = str("name of tensor #" + std::to_string(i));
      mark(name + " (dimension count)");
      uint32_t nd = u32();
      for (uint32_t d = 0; d < nd; ++d) {
        mark(name + " (dimension)");
        p_ += 8;
      }
      mark(name + " (type)");
      p_ += 4;
      mark(name + " (offset)");
      p_ += 8;
    }
    end_of_infos_ = p_;
    mark("<padding>");
    return out_;
  }

  uint64_t n_tensors() const { return n_tensors_; }
  uint64_t n_kv() const { return n_kv_; }
  size_t end_of_infos() const { return end_of_infos_; }

 private:
  void mark(std::string field) { out_.push_back({p_, std::move(field), arrays_}); }
  uint64_t u64() {
    uint64_t v;
    std::memcpy(&v, b_.data() + p_, 8);
    p_ += 8;
    return v;
  }
  uint32_t u32() {
    uint32_t v;
    std::memcpy(&v, b_.data() + p_, 4);
    p_ += 4;
    return v;
  }
  std::string str(const std::string& field) {
    mark(field);
    uint64_t n = u64();
    if (n) mark(field);  // inside the characters
    std::string s(reinterpret_cast<const char*>(b_.data() + p_), n);
    p_ += n;
    return s;
  }
  static uint64_t min_size(uint32_t t) {
    switch (GgufType(t)) {
      case GgufType::kU8:
      case GgufType::kI8:
      case GgufType::kBool:
        return 1;
      case GgufType::kU16:
      case GgufType::kI16:
        return 2;
      case GgufType::kU32:
      case GgufType::kI32:
      case GgufType::kF32:
        return 4;
      case GgufType::kArray:
        return 12;
      default:
        return 8;
    }
  }
  void value(uint32_t t, const std::string& key) {
    switch (GgufType(t)) {
      case GgufType::kString:
        str(key);
        return;
      case GgufType::kArray: {
        mark(key + " (array element type)");
        uint32_t et = u32();
        mark(key + " (array length)");
        uint64_t n = u64();
        arrays_.push_back({n, min_size(et), p_});
        for (uint64_t i = 0; i < n; ++i) value(et, key);
        arrays_.pop_back();
        return;
      }
      default:
        mark(key);
        p_ += min_size(t);
    }
  }

  std::span<const std::byte> b_;
  size_t p_ = 0;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
  size_t end_of_infos_ = 0;
  std::vector<std::array<uint64_t, 3>> arrays_;
  std::vector<Boundary> out_;
};

// What the reader must say about a file cut at b.offset.
std::string expected_message(const Boundary& b, const GgufWalker& w) {
  const uint64_t x = b.offset;
  if (x >= 24 && (w.n_tensors() > (x - 24) / 32 || w.n_kv() > (x - 24) / 13))
    return "impossible for a file of " + std::to_string(x) + " bytes";
  for (const auto& [n, min, after] : b.arrays)
    if (n > (x - after) / min) return "array elements";
  if (b.field == "<padding>") return "truncated: data section would start at";
  return "truncated while reading " + b.field + " at offset " + std::to_string(x);
}

TEST(GgufCorruption, SmallFileParses) {
  auto bytes = small_gguf();
  GgufFile f = parse(bytes);
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.metadata().size(), 8u);  // with general.alignment
}

TEST(GgufCorruption, TruncationAtEveryHeaderBoundaryNamesTheField) {
  auto bytes = small_gguf();
  GgufWalker walker(bytes);
  std::vector<Boundary> bounds = walker.walk();
  ASSERT_GT(bounds.size(), 60u);
  size_t exact = 0;
  for (const Boundary& b : bounds) {
    SCOPED_TRACE("cut at " + std::to_string(b.offset) + " (" + b.field + ")");
    ExactBuffer cut{std::span(bytes).first(b.offset)};
    std::string want = expected_message(b, walker);
    EXPECT_TRUE(ThrowsError([&] { parse(cut.span()); }, {kLabel, want}));
    exact += want.starts_with("truncated while reading");
    // Past the metadata (whose first entries are read before the counts can
    // be checked against the bytes left) every cut names its field exactly.
    if (b.field.find("tensor") != std::string::npos || b.field.starts_with("t.")) {
      EXPECT_TRUE(want.starts_with("truncated while reading")) << want;
    }
  }
  EXPECT_GT(exact, bounds.size() / 2);
  // Inside the data section: the tensor cut short is named (tensors are
  // checked in file order, and the writer stores them in offset order).
  GgufFile full = parse(bytes);
  for (const auto& t : full.tensors()) {
    const size_t begin = full.data_offset() + t.offset;
    for (size_t cut_at : {begin + 1, begin + t.data.size() / 2, begin + t.data.size() - 1}) {
      ExactBuffer cut{std::span(bytes).first(cut_at)};
      EXPECT_TRUE(ThrowsError([&] { parse(cut.span()); },
                              {kLabel, "tensor '" + t.name + "'", "extends past the end"}))
          << "cut at " << cut_at;
    }
  }
}

TEST(GgufCorruption, TruncationAtEveryByte) {
  auto bytes = small_gguf();
  for (size_t n = 0; n < bytes.size(); ++n) {
    ExactBuffer cut{std::span(bytes).first(n)};
    ASSERT_TRUE(ThrowsErrorAnyOf([&] { parse(cut.span()); }, {{kLabel, "truncated"},
                                                              {kLabel, "past the end"},
                                                              {kLabel, "impossible for a file of"},
                                                              {kLabel, "array elements"}}))
        << "cut at " << n << " of " << bytes.size();
  }
}

TEST(GgufCorruption, TruncatedFixtureCopy) {
  std::string fx = fixtures_dir();
  if (fx.empty()) GTEST_SKIP() << "fixtures not found (set TANDEM_FIXTURES)";
  const std::string src = fx + "/qwen3moe/model-q4_k_m.gguf";
  auto bytes = read_file(src);
  GgufFile full = GgufFile::parse(bytes, "fixture.gguf");
  const size_t header_end = full.data_offset();
  // Every byte of the header (metadata, tokenizer arrays, tensor infos) and a
  // sample of the data section, in memory.
  for (size_t n = 0; n < header_end + 4096; n += n < header_end ? 1 : 61) {
    ExactBuffer cut{std::span(bytes).first(n)};
    ASSERT_TRUE(ThrowsErrorAnyOf([&] { GgufFile::parse(cut.span(), "fixture.gguf"); },
                                 {{"fixture.gguf", "truncated"},
                                  {"fixture.gguf", "past the end"},
                                  {"fixture.gguf", "impossible for a file of"},
                                  {"fixture.gguf", "array elements"}}))
        << "cut at " << n;
  }
  // Real files cut on disk, read through the mapping and the model loader.
  TempDir dir("gguf_trunc");
  const std::string copy = dir / "model.gguf";
  for (size_t n : {size_t{0}, size_t{3}, size_t{13}, size_t{4000}, header_end - 1, header_end + 1,
                   bytes.size() / 2, bytes.size() - 1}) {
    copy_file_writable(src, copy);
    fs::resize_file(copy, n);
    EXPECT_TRUE(
        ThrowsErrorAnyOf([&] { ModelSource::open(copy); },
                         {{copy, "truncated"}, {copy, "past the end"}, {copy, "array elements"}}))
        << "cut at " << n;
  }
}

// Checks what a successful parse promises: every tensor inside the buffer,
// of its declared size, none overlapping.
void expect_tensors_inside(const GgufFile& f, std::span<const std::byte> buf) {
  const std::byte* lo = buf.data();
  const std::byte* hi = buf.data() + buf.size();
  std::vector<std::pair<const std::byte*, size_t>> ranges;
  for (const auto& t : f.tensors()) {
    ASSERT_GE(t.data.data(), lo) << t.name;
    ASSERT_LE(t.data.data() + t.data.size(), hi) << t.name;
    ASSERT_EQ(t.data.size(), *bytes_for(t.dtype, t.n_elems)) << t.name;
    ASSERT_EQ(t.data.data(), lo + f.data_offset() + t.offset) << t.name;
    ranges.emplace_back(t.data.data(), t.data.size());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    ASSERT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first);
}

// Parses a mutated file; on success checks the views and runs the model
// mapping (which must also fail cleanly or succeed and read every tensor).
void parse_mutant(std::span<const std::byte> bytes, const std::string& what) {
  SCOPED_TRACE(what);
  ExactBuffer buf(bytes);
  std::optional<GgufFile> f;
  try {
    f.emplace(GgufFile::parse(buf.span(), kLabel));
  } catch (const Error& e) {
    ASSERT_NE(std::string(e.what()).find(kLabel), std::string::npos) << e.what();
    return;
  } catch (const std::exception& e) {
    FAIL() << "unrelated exception " << typeid(e).name() << ": " << e.what();
  }
  expect_tensors_inside(*f, buf.span());
  try {
    ModelConfig c = config_from_gguf(*f);
    TensorMap m = TensorMap::from_gguf(c, *f);
    for (const auto& t : m.tensors()) {
      auto v = read_f32(t);
      ASSERT_EQ(v.size(), t.n_elems());
    }
  } catch (const Error& e) {
    ASSERT_NE(std::string(e.what()).find(kLabel), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    FAIL() << "unrelated exception from the model mapping " << typeid(e).name() << ": " << e.what();
  }
}

// A tiny Mixtral-layout model (llama architecture with experts).
TinyModel llama(uint32_t head_dim = 4, std::optional<uint32_t> rope_dims = std::nullopt) {
  TinyModel m;
  m.arch = "llama";
  m.head_dim = head_dim;
  m.rope_dims = rope_dims;
  return m;
}

TEST(GgufCorruption, TinyModelMapsCleanly) {
  auto bytes = tiny_qwen3moe_gguf();
  GgufFile f = parse(bytes);
  ModelConfig c = config_from_gguf(f);
  TensorMap m = TensorMap::from_gguf(c, f);
  EXPECT_EQ(m.tensors().size(), 15u);
  EXPECT_TRUE(m.unused().empty());
}

TEST(GgufCorruption, EveryHeaderByteFlipped) {
  for (auto bytes :
       {tiny_qwen3moe_gguf(), tiny_moe_gguf(llama()), tiny_deepseek2_gguf(), small_gguf()}) {
    const size_t header_end = parse(bytes).data_offset();
    for (size_t i = 0; i < header_end; ++i) {
      const std::byte orig = bytes[i];
      for (uint8_t v : {uint8_t(uint8_t(orig) ^ 0xFF), uint8_t(uint8_t(orig) ^ 0x01),
                        uint8_t(uint8_t(orig) ^ 0x80), uint8_t(0), uint8_t(0xFF)}) {
        if (std::byte(v) == orig) continue;
        bytes[i] = std::byte(v);
        parse_mutant(bytes, "byte " + std::to_string(i) + " = " + std::to_string(v));
        if (::testing::Test::HasFatalFailure()) return;
        bytes[i] = orig;
      }
    }
  }
}

TEST(GgufCorruption, RandomMultiByteFlips) {
  std::mt19937_64 rng(20240611);
  const auto base = tiny_qwen3moe_gguf();
  const size_t header_end = parse(base).data_offset();
  for (int iter = 0; iter < 4000; ++iter) {
    auto bytes = base;
    int n = 1 + int(rng() % 8);
    // Mostly the header, sometimes anywhere (data bytes are just weights).
    size_t range = iter % 4 == 0 ? bytes.size() : header_end;
    for (int k = 0; k < n; ++k) bytes[rng() % range] = std::byte(rng() & 0xFF);
    if (iter % 16 == 0) bytes.resize(rng() % bytes.size());
    parse_mutant(bytes, "iteration " + std::to_string(iter));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(GgufCorruption, TinyMixtralMapsCleanly) {
  auto bytes = tiny_moe_gguf(llama());
  GgufFile f = parse(bytes);
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.arch, Arch::kMixtral);
  TensorMap m = TensorMap::from_gguf(c, f);
  EXPECT_EQ(m.tensors().size(), 13u);
  for (const auto& t : m.tensors()) EXPECT_EQ(read_f32(t).size(), t.n_elems());
}

TEST(GgufCorruption, TinyDeepseekMapsCleanly) {
  auto bytes = tiny_deepseek2_gguf();
  GgufFile f = parse(bytes);
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.arch, Arch::kDeepseekV3);
  EXPECT_TRUE(c.moe.score_correction_bias);
  TensorMap m = TensorMap::from_gguf(c, f);
  EXPECT_TRUE(m.unused().empty());
  EXPECT_FALSE(m.at("blk.0.attn_k_b.weight").zero_copy());  // split from attn_kv_b
  EXPECT_TRUE(m.at("blk.1.attn_k_b.weight").zero_copy());
  for (const auto& t : m.tensors()) EXPECT_EQ(read_f32(t).size(), t.n_elems());
}

TEST(GgufCorruption, LlamaArchOddHeadDim) {
  // q/k rows of a llama-arch GGUF are permuted in pairs per head; an odd head
  // size cannot have been permuted that way (and must not divide by zero).
  auto bytes = tiny_moe_gguf(llama(1, 0));
  EXPECT_TANDEM_ERROR(
      {
        GgufFile f = parse(bytes);
        TensorMap::from_gguf(config_from_gguf(f), f);
      },
      {kLabel, "'blk.0.attn_q.weight'", "head dim 1 is odd"});
  parse_mutant(tiny_moe_gguf(llama(3, 2)), "head dim 3");
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
