#include "common/formats/safetensors.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/formats/writers.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;

std::vector<std::byte> zeros(size_t n) { return std::vector<std::byte>(n); }

TEST(Safetensors, RoundTripWithMetadata) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add_tensor("a", DType::kBF16, {2, 4}, zeros(16));
  w.add_tensor("b", DType::kF8E4M3, {3}, zeros(3));
  auto bytes = w.to_bytes();
  SafetensorsFile f = SafetensorsFile::parse(bytes, "mem.safetensors");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.find("a")->shape, (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(f.find("a")->dtype, DType::kBF16);
  EXPECT_EQ(f.find("b")->dtype, DType::kF8E4M3);
  EXPECT_EQ(f.find("b")->data.size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(Safetensors, DuplicateNamesAndSizeMismatchAreErrors) {
  std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  std::vector<std::byte> bytes(8 + h.size() + 8);
  uint64_t n = h.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, h.data(), h.size());
  try {
    SafetensorsFile::parse(bytes, "dup.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a' appears twice"), std::string::npos) << e.what();
  }
  h = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  bytes.assign(8 + h.size() + 8, std::byte{0});
  n = h.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, h.data(), h.size());
  try {
    SafetensorsFile::parse(bytes, "size.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 8 bytes but shape [3] of f32 needs 12"),
              std::string::npos) << e.what();
  }
}

TEST(Safetensors, ShardedDirectoryAndMissingShard) {
  fs::path dir = fs::path(::testing::TempDir()) / "st_sharded";
  fs::remove_all(dir);
  fs::create_directories(dir);
  SafetensorsWriter s1, s2;
  s1.add_tensor("x", DType::kF32, {2}, zeros(8));
  s2.add_tensor("y", DType::kF16, {4}, zeros(8));
  s1.write((dir / "model-00001-of-00002.safetensors").string());
  s2.write((dir / "model-00002-of-00002.safetensors").string());
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})";
  SafetensorsModel m = SafetensorsModel::open_dir(dir.string());
  EXPECT_EQ(m.files().size(), 2u);
  ASSERT_NE(m.find("y"), nullptr);
  EXPECT_EQ(m.find("y")->dtype, DType::kF16);
  fs::remove(dir / "model-00002-of-00002.safetensors");
  try {
    SafetensorsModel::open_dir(dir.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("shard 'model-00002-of-00002.safetensors' is missing"),
              std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem
