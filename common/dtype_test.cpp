#include "common/dtype.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(DType, GgmlIdsAndBlockSizesMatchGgml) {
  EXPECT_EQ(dtype_from_ggml(0), DType::kF32);
  EXPECT_EQ(dtype_from_ggml(30), DType::kBF16);
  EXPECT_EQ(dtype_from_ggml(12), DType::kQ4_K);
  EXPECT_EQ(dtype_from_ggml(14), DType::kQ6_K);
  EXPECT_FALSE(dtype_from_ggml(16).has_value());  // IQ2_XXS: not read
  EXPECT_EQ(ggml_type_name(16), "IQ2_XXS");
  EXPECT_EQ(*bytes_for(DType::kQ4_K, 512), 288u);
  EXPECT_EQ(*bytes_for(DType::kQ6_K, 256), 210u);
  EXPECT_EQ(*bytes_for(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(*bytes_for(DType::kQ5_0, 32), 22u);
  EXPECT_EQ(*bytes_for(DType::kBF16, 3), 6u);
}

TEST(DType, PartialBlocksAndOverflowAreRejected) {
  EXPECT_FALSE(bytes_for(DType::kQ4_K, 255).has_value());
  EXPECT_FALSE(bytes_for(DType::kF32, UINT64_MAX / 2).has_value());
}

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i < kDTypeCount; ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(dtype_from_name(name(t)), t);
    if (!info(t).safetensors_name.empty()) {
      EXPECT_EQ(dtype_from_safetensors(info(t).safetensors_name), t);
    }
  }
  EXPECT_EQ(dtype_from_safetensors("F8_E4M3"), DType::kF8E4M3);
  EXPECT_FALSE(dtype_from_safetensors("F8_E5M2").has_value());
}

}  // namespace
}  // namespace tandem
