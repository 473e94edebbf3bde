#include "common/model/tensor_map.h"

#include <gtest/gtest.h>

#include "common/model/tensor_map_builder.h"

namespace tandem {
namespace {

TEST(TensorMap, UnpermuteInvertsConvertHfToGgufPermute) {
  // convert_hf_to_gguf permute(): reshape(n_head, 2, hd/2).swapaxes(1, 2).
  const uint32_t heads = 2, hd = 8, rows = heads * hd;
  std::vector<uint32_t> permuted(rows);  // GGUF row g holds HF row permuted[g]
  for (uint32_t h = 0; h < heads; ++h)
    for (uint32_t i = 0; i < hd / 2; ++i)
      for (uint32_t j = 0; j < 2; ++j) permuted[h * hd + 2 * i + j] = h * hd + j * hd / 2 + i;
  auto gather = TensorMapBuilder::unpermute_rows(rows, heads);
  for (uint32_t r = 0; r < rows; ++r) EXPECT_EQ(permuted[gather[r]], r) << r;
}

TEST(TensorMap, ReadF32AppliesGatherTransposeAndFp8Scales) {
  // A 4x2 f32 source; piece 1 takes rows {3,1} as is, piece 2 takes rows 0..1 transposed.
  std::vector<float> src = {0, 1, 10, 11, 20, 21, 30, 31};
  SourceMatrix m;
  m.tensor = "src";
  m.dtype = DType::kF32;
  m.rows = 4;
  m.cols = 2;
  m.data = std::as_bytes(std::span(src));
  MappedTensor t;
  t.name = "t";
  t.shape = {4, 2};
  t.dtype = DType::kF32;
  t.pieces.push_back({&m, 0, 0, {3, 1}, false});
  t.pieces.push_back({&m, 0, 2, {}, true});
  EXPECT_EQ(read_f32(t), (std::vector<float>{30, 31, 10, 11, 0, 10, 1, 11}));

  // FP8 e4m3 1.0 = 0x38; 2x2 blocks of a 3x3 weight, scales [[2, 3], [5, 7]].
  std::vector<uint8_t> w(9, 0x38);
  std::vector<float> scales = {2, 3, 5, 7};
  SourceMatrix f;
  f.tensor = "w";
  f.dtype = DType::kF8E4M3;
  f.rows = f.cols = 3;
  f.data = std::as_bytes(std::span(w));
  f.scale = std::as_bytes(std::span(scales));
  f.block_rows = f.block_cols = 2;
  MappedTensor ft{"w", {3, 3}, DType::kF8E4M3, {{&f, 0, 3, {}, false}}};
  EXPECT_EQ(read_f32(ft), (std::vector<float>{2, 2, 3, 2, 2, 3, 5, 5, 7}));
}

}  // namespace
}  // namespace tandem
