#include "common/formats/gguf.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/formats/writers.h"

namespace tandem {
namespace {

std::vector<std::byte> floats(std::initializer_list<float> v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.begin(), b.size());
  return b;
}

TEST(Gguf, RoundTripsEveryMetadataTypeAndTensors) {
  GgufWriter w(64);
  w.set("k.u8", {GgufType::kU8, uint64_t{200}});
  w.set("k.i8", {GgufType::kI8, int64_t{-5}});
  w.set("k.u16", {GgufType::kU16, uint64_t{60000}});
  w.set("k.i16", {GgufType::kI16, int64_t{-30000}});
  w.set_u32("k.u32", 4000000000u);
  w.set("k.i32", {GgufType::kI32, int64_t{-7}});
  w.set("k.u64", {GgufType::kU64, uint64_t{1} << 40});
  w.set("k.i64", {GgufType::kI64, int64_t{-(int64_t{1} << 40)}});
  w.set_f32("k.f32", 0.5f);
  w.set("k.f64", {GgufType::kF64, 0.125});
  w.set_bool("k.bool", true);
  w.set_string("k.str", "héllo");
  w.set_strings("k.strs", {"a", "", "ccc"});
  w.set_i32s("k.i32s", {1, -2, 3});
  w.add_tensor("t.a", DType::kF32, {2, 3}, floats({1, 2, 3, 4, 5, 6}));
  w.add_tensor("t.b", DType::kF32, {1}, floats({7}));
  auto bytes = w.to_bytes();
  GgufFile f = GgufFile::parse(bytes, "mem.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(*f.get_uint("k.u8"), 200u);
  EXPECT_EQ(std::get<int64_t>(f.find("k.i8")->value), -5);
  EXPECT_EQ(*f.get_uint("k.u16"), 60000u);
  EXPECT_EQ(*f.get_uint("k.u32"), 4000000000u);
  EXPECT_EQ(*f.get_uint("k.u64"), uint64_t{1} << 40);
  EXPECT_THROW(f.get_uint("k.i64"), Error);  // negative
  EXPECT_DOUBLE_EQ(*f.get_float("k.f32"), 0.5);
  EXPECT_DOUBLE_EQ(*f.get_float("k.f64"), 0.125);
  EXPECT_EQ(*f.get_bool("k.bool"), true);
  EXPECT_EQ(*f.get_string("k.str"), "héllo");
  EXPECT_THROW(f.get_string("k.u8"), Error);
  EXPECT_FALSE(f.get_uint("absent").has_value());
  const GgufArray* strs = f.get_array("k.strs");
  ASSERT_NE(strs, nullptr);
  ASSERT_EQ(strs->items.size(), 3u);
  EXPECT_EQ(std::get<std::string>(strs->items[2].value), "ccc");
  EXPECT_EQ(std::get<int64_t>(f.get_array("k.i32s")->items[1].value), -2);

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor* a = f.find_tensor("t.a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(a->ne, (std::vector<uint64_t>{3, 2}));
  float v[6];
  std::memcpy(v, a->data.data(), 24);
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_EQ(f.find_tensor("t.b")->offset % 64, 0u);
}

TEST(Gguf, ErrorsNameTheFileAndTheProblem) {
  GgufWriter w;
  w.add_tensor("t.a", DType::kF32, {4}, floats({1, 2, 3, 4}));
  auto bytes = w.to_bytes();
  bytes.resize(bytes.size() - 4);  // cut the tensor's last value
  try {
    GgufFile::parse(bytes, "cut.gguf");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cut.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("t.a"), std::string::npos) << m;
    EXPECT_NE(m.find("past the end"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace tandem
