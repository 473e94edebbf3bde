#include "kernels/cpu/weight_layout.h"

#include <cstring>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/bf16_x16z.h"
#include "kernels/cpu/quant_blocks.h"

namespace tandem::kernels {
namespace {

constexpr size_t kQsOffset = offsetof(BlockQ4_K, qs);
constexpr size_t kQ8KQs = offsetof(BlockQ8_K, qs);

// Position of row qs byte (c, s, 0) in a q4_k_x4 group block, and in a row's block.
constexpr size_t group_qs(int r, int s, int c) { return 64 + 64 * size_t(s) + 16 * size_t(r) + 4 * size_t(c); }
constexpr size_t row_qs(int s, int c) { return kQsOffset + 32 * size_t(c) + 4 * size_t(s); }

// A row's q4_k_x4 meta (weight_layout.h): two little-endian words, word h
// holding sc[4h + k] at bits 6k, m[4h + k] at bits 24 + 6k (k = 0..3) and
// d (h = 0) or dmin (h = 1) at bits 48..63.
void pack_q4_k_meta(const uint8_t* block, uint8_t* meta) {
  for (int h = 0; h < 2; ++h) {
    uint64_t word = uint64_t(load_unaligned<uint16_t>(block + 2 * h)) << 48;
    for (int k = 0; k < 4; ++k) {
      uint8_t sc, m;
      k4_scale_min(4 * h + k, block + offsetof(BlockQ4_K, scales), &sc, &m);
      word |= uint64_t(sc) << (6 * k) | uint64_t(m) << (24 + 6 * k);
    }
    std::memcpy(meta + 8 * h, &word, 8);
  }
}

// Back to d, dmin and ggml's 12 scale bytes (k4_scale_min's packing).
void unpack_q4_k_meta(const uint8_t* meta, uint8_t* block) {
  uint8_t sc[8], m[8];
  for (int h = 0; h < 2; ++h) {
    uint64_t word;
    std::memcpy(&word, meta + 8 * h, 8);
    const uint16_t half = uint16_t(word >> 48);
    std::memcpy(block + 2 * h, &half, 2);
    for (int k = 0; k < 4; ++k) {
      sc[4 * h + k] = uint8_t((word >> (6 * k)) & 63);
      m[4 * h + k] = uint8_t((word >> (24 + 6 * k)) & 63);
    }
  }
  uint8_t* q = block + offsetof(BlockQ4_K, scales);
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t(sc[j] | (sc[j + 4] >> 4) << 6);
    q[j + 4] = uint8_t(m[j] | (m[j + 4] >> 4) << 6);
    q[j + 8] = uint8_t((sc[j + 4] & 0xF) | (m[j + 4] & 0xF) << 4);
  }
}

// q5_k_x4 (weight_layout.h): row r's Q5_K block into a group block, and
// back. d, dmin and the scale bytes sit where Q4_K's do, so the meta is
// q4_k_x4's; qs goes as q4_k_x4's within each step's line; the fifth bits
// (bit j of qh[l]: value l of sub-block j) to byte 16r + 4c + k of part p,
// bit 2i + h, for value 4s + k of sub-block 2c + h (s = 4p + i).
constexpr size_t kQ5Qs = offsetof(BlockQ5_K, qs), kQ5Qh = offsetof(BlockQ5_K, qh);
constexpr size_t group_q5_qs(int r, int s, int c) { return q5_k_x4_qs_at(s) + 16 * size_t(r) + 4 * size_t(c); }
constexpr size_t group_qh(int r, int p, int c, int k) {
  return q5_k_x4_qh_at(p) + 16 * size_t(r) + 4 * size_t(c) + size_t(k);
}
void pack_q5_k_row(const uint8_t* block, int r, uint8_t* g) {
  pack_q4_k_meta(block, g + 16 * r);
  for (int s = 0; s < 8; ++s)
    for (int c = 0; c < 4; ++c) std::memcpy(g + group_q5_qs(r, s, c), block + kQ5Qs + 32 * size_t(c) + 4 * size_t(s), 4);
  for (int p = 0; p < 2; ++p)
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 4; ++k) {
        uint8_t byte = 0;
        for (int i = 0; i < 4; ++i)
          for (int h = 0; h < 2; ++h)
            byte |= uint8_t(((block[kQ5Qh + 4 * size_t(4 * p + i) + size_t(k)] >> (2 * c + h)) & 1) << (2 * i + h));
        g[group_qh(r, p, c, k)] = byte;
      }
}
void unpack_q5_k_row(const uint8_t* g, int r, uint8_t* block) {
  unpack_q4_k_meta(g + 16 * r, block);
  for (int s = 0; s < 8; ++s)
    for (int c = 0; c < 4; ++c) std::memcpy(block + kQ5Qs + 32 * size_t(c) + 4 * size_t(s), g + group_q5_qs(r, s, c), 4);
  std::memset(block + kQ5Qh, 0, kQK_K / 8);
  for (int p = 0; p < 2; ++p)
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 4; ++k) {
        const uint8_t byte = g[group_qh(r, p, c, k)];
        for (int i = 0; i < 4; ++i)
          for (int h = 0; h < 2; ++h)
            block[kQ5Qh + 4 * size_t(4 * p + i) + size_t(k)] |= uint8_t(((byte >> (2 * i + h)) & 1) << (2 * c + h));
      }
}

// q6_k_x4 (weight_layout.h): row r's Q6_K block into a group block, and
// back, through its 256 values' 6 bits (ggml's: value 128h + l + 32j takes
// its low 4 bits from ql[64h + 32(j % 2) + l] (j < 2: low nibble, else
// high) and its top 2 from bits 2j..2j+1 of qh[32h + l]).
void q6_k_bits(const uint8_t* block, uint8_t* q) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = block[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2)) & 0xF;
        const uint8_t hi = block[offsetof(BlockQ6_K, qh) + 32 * h + l] >> (2 * j) & 3;
        q[128 * h + 32 * j + l] = uint8_t(lo | hi << 4);
      }
}
void q6_k_from_bits(const uint8_t* q, uint8_t* block) {
  std::memset(block, 0, offsetof(BlockQ6_K, scales));
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        const uint8_t v = q[128 * h + 32 * j + l];
        block[64 * h + 32 * (j % 2) + l] |= uint8_t((v & 0xF) << (4 * (j / 2)));
        block[offsetof(BlockQ6_K, qh) + 32 * h + l] |= uint8_t((v >> 4) << (2 * j));
      }
}
void pack_q6_k_row(const uint8_t* block, int r, uint8_t* g) {
  uint8_t q[kQK_K];
  q6_k_bits(block, q);
  std::memcpy(g + 16 * r, block + offsetof(BlockQ6_K, scales), 16);
  std::memcpy(g + kQ6KX4D + 2 * size_t(r), block + offsetof(BlockQ6_K, d), 2);
  for (int s = 0; s < 8; ++s)
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 4; ++k) {
        const uint8_t lo = q[64 * c + 4 * s + k], hi = q[64 * c + 32 + 4 * s + k];
        const size_t at = 16 * size_t(r) + 4 * size_t(c) + size_t(k);
        g[q6_k_x4_qs_at(s) + at] = uint8_t((lo & 0xF) | (hi & 0xF) << 4);
        uint8_t& top = g[q6_k_x4_qh_at(s / 2) + at];
        const int i = s % 2;
        if (i == 0) top = 0;
        top |= uint8_t((lo >> 4) << (4 * i) | (hi >> 4) << (4 * i + 2));
      }
}
void unpack_q6_k_row(const uint8_t* g, int r, uint8_t* block) {
  uint8_t q[kQK_K];
  for (int s = 0; s < 8; ++s)
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 4; ++k) {
        const size_t at = 16 * size_t(r) + 4 * size_t(c) + size_t(k);
        const uint8_t nib = g[q6_k_x4_qs_at(s) + at], top = g[q6_k_x4_qh_at(s / 2) + at] >> (4 * (s % 2));
        q[64 * c + 4 * s + k] = uint8_t((nib & 0xF) | (top & 3) << 4);
        q[64 * c + 32 + 4 * s + k] = uint8_t((nib >> 4) | (top >> 2 & 3) << 4);
      }
  q6_k_from_bits(q, block);
  std::memcpy(block + offsetof(BlockQ6_K, scales), g + 16 * r, 16);
  std::memcpy(block + offsetof(BlockQ6_K, d), g + kQ6KX4D + 2 * size_t(r), 2);
}

}  // namespace

LayoutBlocks layout_blocks(WeightLayout l) {
  switch (l) {
    case WeightLayout::kQ4KX4: return {kX4Rows, kQK_K, sizeof(BlockQ4_K), kQ4KX4GroupBlock};
    case WeightLayout::kQ5KX4: return {kX4Rows, kQK_K, sizeof(BlockQ5_K), kQ5KX4GroupBlock};
    case WeightLayout::kQ6KX4: return {kX4Rows, kQK_K, sizeof(BlockQ6_K), kQ6KX4GroupBlock};
    case WeightLayout::kQ8_0X4: return {kX4Rows, kQK8_0, sizeof(BlockQ8_0), kQ8_0X4GroupBlock};
    case WeightLayout::kBf16X16: return {kX16Rows, 32, 64, kBf16X16GroupBlock};
    case WeightLayout::kFp8X16: return {kFp8X16Rows, size_t(kFp8X16Cols), size_t(kFp8X16Cols), kFp8X16GroupBlock};
    case WeightLayout::kQ8_0X16: return {kX16Rows, kQK8_0, sizeof(BlockQ8_0), kQ8_0X16GroupBlock};
    case WeightLayout::kBf16X16Z: return {kX16Rows, size_t(kBf16X16ZCols), 2 * size_t(kBf16X16ZCols), kBf16X16ZUnit};
    case WeightLayout::kRowMajor: break;
  }
  return {1, 1, 0, 0};
}

std::string_view layout_name(WeightLayout l) {
  switch (l) {
    case WeightLayout::kRowMajor: return "rowmajor";
    case WeightLayout::kQ4KX4: return "q4_k_x4";
    case WeightLayout::kQ8_0X4: return "q8_0_x4";
    case WeightLayout::kBf16X16: return "bf16_x16";
    case WeightLayout::kFp8X16: return "fp8_x16";
    case WeightLayout::kQ8_0X16: return "q8_0_x16";
    case WeightLayout::kBf16X16Z: return "bf16_x16z";
    case WeightLayout::kQ5KX4: return "q5_k_x4";
    case WeightLayout::kQ6KX4: return "q6_k_x4";
  }
  return "?";
}

std::optional<WeightLayout> layout_from_name(std::string_view name) {
  for (WeightLayout l : {WeightLayout::kRowMajor, WeightLayout::kQ4KX4, WeightLayout::kQ8_0X4, WeightLayout::kBf16X16,
                         WeightLayout::kFp8X16, WeightLayout::kQ8_0X16, WeightLayout::kBf16X16Z, WeightLayout::kQ5KX4,
                         WeightLayout::kQ6KX4})
    if (name == layout_name(l)) return l;
  return std::nullopt;
}

WeightLayout repacked_layout(DType type) {
  if (type == DType::kQ4_K) return WeightLayout::kQ4KX4;
  if (type == DType::kQ5_K) return WeightLayout::kQ5KX4;
  if (type == DType::kQ6_K) return WeightLayout::kQ6KX4;
  if (type == DType::kQ8_0) return WeightLayout::kQ8_0X4;
  if (type == DType::kBF16) return WeightLayout::kBf16X16;
  return WeightLayout::kRowMajor;
}

WeightLayout expert_layout(DType type, CpuIsa isa) {
  const WeightLayout l = repacked_layout(type);
  // The level whose kernels read the layout faster than rowmajor rows (below it the
  // reference would de-interleave every group).
  const CpuIsa needs = l == WeightLayout::kBf16X16 ? CpuIsa::kAvx512Bf16
                       : l == WeightLayout::kQ8_0X4 ? CpuIsa::kAvx512
                                                    : CpuIsa::kAvx2;  // the k-quant x4 layouts
  return isa >= needs ? l : WeightLayout::kRowMajor;
}

WeightLayout expert_matrix_layout(DType type, CpuIsa isa, int64_t rows, int64_t cols) {
  // FP8 as fp8_x16 for the avx512bf16 level (weight_layout.h); the amx
  // level's FP8 tiles read rowmajor rows.
  if (type == DType::kF8E4M3 && isa == CpuIsa::kAvx512Bf16 && layout_fits(WeightLayout::kFp8X16, type, rows, cols))
    return WeightLayout::kFp8X16;
  // Q8_0 as q8_0_x16 for the avx512bf16 level (VNNI); the amx level's Q8_0
  // tiles read q8_0_x4.
  if (type == DType::kQ8_0 && isa == CpuIsa::kAvx512Bf16 && layout_fits(WeightLayout::kQ8_0X16, type, rows, cols))
    return WeightLayout::kQ8_0X16;
  // BF16 as bf16_x16z for the avx512bf16 level (the loader falls back to
  // bf16_x16 for a tensor whose values do not code); the amx level's BF16
  // tiles read bf16_x16.
  if (type == DType::kBF16 && isa == CpuIsa::kAvx512Bf16 && layout_fits(WeightLayout::kBf16X16Z, type, rows, cols))
    return WeightLayout::kBf16X16Z;
  const WeightLayout l = expert_layout(type, isa);
  return layout_fits(l, type, rows, cols) ? l : WeightLayout::kRowMajor;
}

bool layout_fits(WeightLayout l, DType type, int64_t rows, int64_t cols) {
  if (l == WeightLayout::kRowMajor) return true;
  const LayoutBlocks b = layout_blocks(l);
  if (l == WeightLayout::kFp8X16)
    return type == DType::kF8E4M3 && rows > 0 && rows % b.rows == 0 && cols > 0 && cols % kFp8X16Cols == 0;
  if (l == WeightLayout::kBf16X16Z)
    return type == DType::kBF16 && rows > 0 && rows % b.rows == 0 && cols > 0 && cols % kBf16X16ZCols == 0;
  if (l == WeightLayout::kQ8_0X16)
    return type == DType::kQ8_0 && rows > 0 && rows % b.rows == 0 && cols > 0 && cols % kQK8_0 == 0;
  // bf16_x16: whole runs of 64 values, so the one-token kernel's vec_dot
  // order has no tail to sum apart.
  const int64_t block = l == WeightLayout::kBf16X16 ? 64 : int64_t(b.block_elems);
  return repacked_layout(type) == l && rows > 0 && rows % b.rows == 0 && cols > 0 && cols % block == 0;
}

void pack_group_block(WeightLayout l, const uint8_t* const* rows, uint8_t* g) {
  if (l == WeightLayout::kBf16X16Z) throw Error(ErrorKind::kInternal, "bf16_x16z packs whole groups (pack_group)");
  if (l == WeightLayout::kQ8_0X16) {
    for (int r = 0; r < kX16Rows; ++r) {
      std::memcpy(g + 2 * r, rows[r], 2);
      for (int k = 0; k < kQK8_0; ++k) g[q8_0_x16_offset(r, k)] = uint8_t(rows[r][2 + k] ^ 0x80);  // w + 128
    }
    return;
  }
  if (l == WeightLayout::kFp8X16) {
    for (int r = 0; r < kFp8X16Rows; ++r)
      for (int c = 0; c < int(kFp8X16Cols); ++c) g[fp8_x16_offset(r, c)] = rows[r][c];
    return;
  }
  if (l == WeightLayout::kBf16X16) {
    for (int r = 0; r < kX16Rows; ++r)
      for (int k = 0; k < 16; ++k) std::memcpy(g + 64 * k + 4 * r, rows[r] + 4 * k, 4);
    return;
  }
  for (int r = 0; r < 4; ++r) {
    if (l == WeightLayout::kQ8_0X4) {
      std::memcpy(g + 2 * r, rows[r], 2);
      for (int k = 0; k < 32; ++k) g[8 + 32 * r + k] = uint8_t(rows[r][2 + k] ^ 0x80);  // w + 128
      continue;
    }
    if (l == WeightLayout::kQ5KX4) {
      pack_q5_k_row(rows[r], r, g);
      continue;
    }
    if (l == WeightLayout::kQ6KX4) {
      pack_q6_k_row(rows[r], r, g);
      continue;
    }
    pack_q4_k_meta(rows[r], g + 16 * r);
    for (int s = 0; s < 8; ++s)
      for (int c = 0; c < 4; ++c) std::memcpy(g + group_qs(r, s, c), rows[r] + row_qs(s, c), 4);
  }
}

void unpack_group_block(WeightLayout l, const uint8_t* g, uint8_t* const* rows) {
  if (l == WeightLayout::kBf16X16Z) throw Error(ErrorKind::kInternal, "bf16_x16z unpacks whole groups (unpack_group)");
  if (l == WeightLayout::kQ8_0X16) {
    for (int r = 0; r < kX16Rows; ++r) {
      std::memcpy(rows[r], g + 2 * r, 2);
      for (int k = 0; k < kQK8_0; ++k) rows[r][2 + k] = uint8_t(g[q8_0_x16_offset(r, k)] ^ 0x80);
    }
    return;
  }
  if (l == WeightLayout::kFp8X16) {
    for (int r = 0; r < kFp8X16Rows; ++r)
      for (int c = 0; c < int(kFp8X16Cols); ++c) rows[r][c] = g[fp8_x16_offset(r, c)];
    return;
  }
  if (l == WeightLayout::kBf16X16) {
    for (int r = 0; r < kX16Rows; ++r)
      for (int k = 0; k < 16; ++k) std::memcpy(rows[r] + 4 * k, g + 64 * k + 4 * r, 4);
    return;
  }
  for (int r = 0; r < 4; ++r) {
    if (l == WeightLayout::kQ8_0X4) {
      std::memcpy(rows[r], g + 2 * r, 2);
      for (int k = 0; k < 32; ++k) rows[r][2 + k] = uint8_t(g[8 + 32 * r + k] ^ 0x80);
      continue;
    }
    if (l == WeightLayout::kQ5KX4) {
      unpack_q5_k_row(g, r, rows[r]);
      continue;
    }
    if (l == WeightLayout::kQ6KX4) {
      unpack_q6_k_row(g, r, rows[r]);
      continue;
    }
    unpack_q4_k_meta(g + 16 * r, rows[r]);
    for (int s = 0; s < 8; ++s)
      for (int c = 0; c < 4; ++c) std::memcpy(rows[r] + row_qs(s, c), g + group_qs(r, s, c), 4);
  }
}

bool pack_group(WeightLayout l, const uint8_t* rows, int64_t matrix_rows, int64_t cols, int64_t g, uint8_t* matrix) {
  const LayoutBlocks sh = layout_blocks(l);
  const size_t nb = size_t(cols) / sh.block_elems, row_bytes = nb * sh.row_block;
  const int64_t groups = matrix_rows / sh.rows, units = int64_t(nb);
  uint8_t* group = matrix + size_t(g) * size_t(sh.rows) * row_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* src[kMaxGroupRows];
    for (int r = 0; r < sh.rows; ++r) src[r] = rows + size_t(r) * row_bytes + b * sh.row_block;
    if (l != WeightLayout::kBf16X16Z) {
      pack_group_block(l, src, group + b * sh.group_block);
      continue;
    }
    uint8_t x16[kBf16X16ZUnit];  // the unit as bf16_x16's four blocks, then coded
    for (int k = 0; k < 4; ++k) {
      const uint8_t* r[kX16Rows];
      for (int i = 0; i < kX16Rows; ++i) r[i] = src[i] + 64 * k;
      pack_group_block(WeightLayout::kBf16X16, r, x16 + kBf16X16GroupBlock * size_t(k));
    }
    if (!bf16_x16z_code(x16, matrix + bf16_x16z_core_at(units, g, int64_t(b)),
                        matrix + bf16_x16z_spare_at(groups, units, g, int64_t(b))))
      return false;
  }
  return true;
}

void unpack_group(WeightLayout l, const uint8_t* matrix, int64_t matrix_rows, int64_t cols, int64_t g,
                  uint8_t* rows) {
  const LayoutBlocks sh = layout_blocks(l);
  const size_t nb = size_t(cols) / sh.block_elems, row_bytes = nb * sh.row_block;
  const int64_t groups = matrix_rows / sh.rows, units = int64_t(nb);
  const uint8_t* group = matrix + size_t(g) * size_t(sh.rows) * row_bytes;
  for (size_t b = 0; b < nb; ++b) {
    uint8_t* dst[kMaxGroupRows];
    for (int r = 0; r < sh.rows; ++r) dst[r] = rows + size_t(r) * row_bytes + b * sh.row_block;
    if (l != WeightLayout::kBf16X16Z) {
      unpack_group_block(l, group + b * sh.group_block, dst);
      continue;
    }
    uint8_t x16[kBf16X16ZUnit];
    bf16_x16z_decode(matrix + bf16_x16z_core_at(units, g, int64_t(b)),
                     matrix + bf16_x16z_spare_at(groups, units, g, int64_t(b)), x16);
    for (int k = 0; k < 4; ++k) {
      uint8_t* r[kX16Rows];
      for (int i = 0; i < kX16Rows; ++i) r[i] = dst[i] + 64 * k;
      unpack_group_block(WeightLayout::kBf16X16, x16 + kBf16X16GroupBlock * size_t(k), r);
    }
  }
}

WeightLayout layout_fallback(WeightLayout l) {
  return l == WeightLayout::kBf16X16Z ? WeightLayout::kBf16X16 : l;
}

bool layout_holds(WeightLayout l, DType type, const uint8_t* w, int64_t rows, int64_t cols) {
  if (l != WeightLayout::kBf16X16Z || !layout_fits(l, type, rows, cols)) return true;
  const size_t row_bytes = 2 * size_t(cols);
  for (int64_t g = 0; g < rows / kX16Rows; ++g)
    for (int64_t u = 0; u < cols / kBf16X16ZCols; ++u) {
      int count[128] = {}, base = 0;
      for (int i = 0; i < kX16Rows; ++i) {
        const uint8_t* r = w + (size_t(g) * kX16Rows + size_t(i)) * row_bytes + size_t(u) * 2 * kBf16X16ZCols;
        for (int64_t c = 0; c < kBf16X16ZCols; ++c) ++count[r[2 * c + 1] & 0x7f];
      }
      if (bf16_x16z_window(count, &base) > kBf16X16ZMaxExceptions) return false;
    }
  return true;
}

bool try_repack_rows(WeightLayout l, DType type, uint8_t* w, int64_t rows, int64_t cols) {
  if (!layout_fits(l, type, rows, cols))
    fail_invalid("layout {} cannot hold a {} x {} matrix of {}", layout_name(l), rows, cols, name(type));
  if (l == WeightLayout::kRowMajor) return true;
  const LayoutBlocks sh = layout_blocks(l);
  const size_t nb = size_t(cols) / sh.block_elems, row_bytes = nb * sh.row_block;
  // bf16_x16z's groups do not keep their rows' bytes (the spares follow
  // every core): a copy of the whole matrix; the others a group's.
  const bool whole = l == WeightLayout::kBf16X16Z;
  const size_t group_bytes = size_t(sh.rows) * row_bytes;
  std::vector<uint8_t> tmp(whole ? size_t(rows) * row_bytes : group_bytes);
  if (whole) std::memcpy(tmp.data(), w, tmp.size());
  // Only bf16_x16z refuses values, and it packs from its copy of the whole
  // matrix: a group it cannot code puts the rows back as they were (the
  // coding is the check: no pass of layout_holds first).
  for (int64_t g = 0; g < rows / sh.rows; ++g) {
    const uint8_t* src = whole ? tmp.data() + size_t(g) * group_bytes : tmp.data();
    if (!whole) std::memcpy(tmp.data(), w + size_t(g) * group_bytes, group_bytes);
    if (!pack_group(l, src, rows, cols, g, w)) {
      if (!whole) throw Error(ErrorKind::kInternal, std::string(layout_name(l)) + ": a group did not pack");
      std::memcpy(w, tmp.data(), tmp.size());
      return false;
    }
  }
  return true;
}

void repack_rows(WeightLayout l, DType type, uint8_t* w, int64_t rows, int64_t cols) {
  if (!try_repack_rows(l, type, w, rows, cols))
    fail_invalid("layout {} cannot code this {} x {} matrix of {}: its values' exponents lie too far apart",
                 layout_name(l), rows, cols, name(type));
}

void relayout_rows(WeightLayout from, WeightLayout to, DType type, uint8_t* w, int64_t rows, int64_t cols) {
  if (from != WeightLayout::kRowMajor) {
    if (!layout_fits(from, type, rows, cols))
      fail_invalid("layout {} cannot hold a {} x {} matrix of {}", layout_name(from), rows, cols, name(type));
    const int gr = layout_group_rows(from);
    const size_t group_bytes = size_t(gr) * *bytes_for(type, uint64_t(cols));
    std::vector<uint8_t> plain(group_bytes * size_t(rows / gr));
    for (int64_t g = 0; g < rows / gr; ++g)
      unpack_group(from, w, rows, cols, g, plain.data() + size_t(g) * group_bytes);
    std::memcpy(w, plain.data(), plain.size());
  }
  repack_rows(to, type, w, rows, cols);
}

namespace {
// Byte group (s, h, c) of a Q8_K block sits at 64c + 32h + 4s plain and at
// 32s + 16h + 4c permuted for q4_k_x4; to_x4 moves each one way or back.
void permute_q8_k(uint8_t* a, int64_t cols, bool to_x4) {
  uint8_t q[kQK_K];
  for (int64_t b = 0; b < cols / kQK_K; ++b) {
    uint8_t* qs = a + size_t(b) * sizeof(BlockQ8_K) + kQ8KQs;
    std::memcpy(q, qs, kQK_K);
    for (int s = 0; s < 8; ++s)
      for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 4; ++c) {
          const size_t x4 = 32 * size_t(s) + 16 * size_t(h) + 4 * size_t(c);
          const size_t plain = 64 * size_t(c) + 32 * size_t(h) + 4 * size_t(s);
          std::memcpy(qs + (to_x4 ? x4 : plain), q + (to_x4 ? plain : x4), 4);
        }
  }
}
}  // namespace

void q4_k_x4_permute_activations(uint8_t* a, int64_t cols) { permute_q8_k(a, cols, true); }
void q4_k_x4_unpermute_activations(uint8_t* a, int64_t cols) { permute_q8_k(a, cols, false); }

}  // namespace tandem::kernels
