// Corruption suite, GGUF part 1: truncations at every header boundary and
// every byte, and flipped bytes (hand-made lying headers are in
// corruption_gguf_headers_test.cpp). Every case must end in a tandem::Error whose message names the file
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

}  // namespace
}  // namespace tandem::testing
