#include "kernels/cpu/weight_layout.h"

#include <cstring>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/quant_blocks.h"

namespace tandem::kernels {
namespace {

constexpr size_t kQsOffset = offsetof(BlockQ4_K, qs);
constexpr size_t kQ8KQs = offsetof(BlockQ8_K, qs);

// Position of row qs byte (c, s, k) in a group block's qs, and in a row's.
constexpr size_t group_qs(int r, int s, int c, int k) { return 64 + 64 * size_t(s) + 16 * size_t(r) + 4 * size_t(c) + size_t(k); }
constexpr size_t row_qs(int s, int c, int k) { return kQsOffset + 32 * size_t(c) + 4 * size_t(s) + size_t(k); }

}  // namespace

std::string_view layout_name(WeightLayout l) {
  switch (l) {
    case WeightLayout::kRowMajor: return "rowmajor";
    case WeightLayout::kQ4KX4: return "q4_k_x4";
  }
  return "?";
}

std::optional<WeightLayout> layout_from_name(std::string_view name) {
  if (name == "rowmajor") return WeightLayout::kRowMajor;
  if (name == "q4_k_x4") return WeightLayout::kQ4KX4;
  return std::nullopt;
}

bool layout_fits(WeightLayout l, DType type, int64_t rows, int64_t cols) {
  if (l == WeightLayout::kRowMajor) return true;
  return type == DType::kQ4_K && rows > 0 && rows % kQ4KX4Rows == 0 && cols > 0 && cols % kQK_K == 0;
}

void q4_k_x4_pack_block(const uint8_t* rows4[4], uint8_t* g) {
  for (int r = 0; r < 4; ++r) {
    std::memcpy(g + 16 * r, rows4[r] + offsetof(BlockQ4_K, scales), kKScaleBytes);
    std::memcpy(g + 16 * r + 12, rows4[r], 4);  // d, dmin
    for (int s = 0; s < 8; ++s)
      for (int c = 0; c < 4; ++c) std::memcpy(g + group_qs(r, s, c, 0), rows4[r] + row_qs(s, c, 0), 4);
  }
}

void q4_k_x4_unpack_block(const uint8_t* g, uint8_t* rows4[4]) {
  for (int r = 0; r < 4; ++r) {
    std::memcpy(rows4[r] + offsetof(BlockQ4_K, scales), g + 16 * r, kKScaleBytes);
    std::memcpy(rows4[r], g + 16 * r + 12, 4);
    for (int s = 0; s < 8; ++s)
      for (int c = 0; c < 4; ++c) std::memcpy(rows4[r] + row_qs(s, c, 0), g + group_qs(r, s, c, 0), 4);
  }
}

void repack_rows(WeightLayout l, DType type, uint8_t* w, int64_t rows, int64_t cols) {
  if (!layout_fits(l, type, rows, cols))
    fail_invalid("layout {} cannot hold a {} x {} matrix of {}", layout_name(l), rows, cols, name(type));
  if (l == WeightLayout::kRowMajor) return;
  const size_t nb = size_t(cols / kQK_K), row_bytes = nb * sizeof(BlockQ4_K);
  std::vector<uint8_t> tmp(4 * row_bytes);
  for (int64_t g = 0; g < rows / 4; ++g) {
    uint8_t* group = w + size_t(g) * 4 * row_bytes;
    std::memcpy(tmp.data(), group, tmp.size());
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* src[4];
      for (int r = 0; r < 4; ++r) src[r] = tmp.data() + size_t(r) * row_bytes + b * sizeof(BlockQ4_K);
      q4_k_x4_pack_block(src, group + b * kQ4KX4GroupBlock);
    }
  }
}

void q4_k_x4_permute_activations(uint8_t* a, int64_t cols) {
  uint8_t q[kQK_K];
  for (int64_t b = 0; b < cols / kQK_K; ++b) {
    uint8_t* qs = a + size_t(b) * sizeof(BlockQ8_K) + kQ8KQs;
    std::memcpy(q, qs, kQK_K);
    for (int s = 0; s < 8; ++s)
      for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 4; ++c)
          std::memcpy(qs + 32 * s + 16 * h + 4 * c, q + 64 * c + 32 * h + 4 * s, 4);
  }
}

void q4_k_x4_unpermute_activations(uint8_t* a, int64_t cols) {
  uint8_t q[kQK_K];
  for (int64_t b = 0; b < cols / kQK_K; ++b) {
    uint8_t* qs = a + size_t(b) * sizeof(BlockQ8_K) + kQ8KQs;
    std::memcpy(q, qs, kQK_K);
    for (int s = 0; s < 8; ++s)
      for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 4; ++c)
          std::memcpy(qs + 64 * c + 32 * h + 4 * s, q + 32 * s + 16 * h + 4 * c, 4);
  }
}

}  // namespace tandem::kernels
