#include "kernels/cpu/dequant.h"

#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"

namespace tandem::kernels {
namespace {


void block_q4_0(const BlockQ4_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    y[j] = static_cast<float>((b.qs[j] & 0xF) - 8) * d;
    y[j + kQK4_0 / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

void block_q8_0(const BlockQ8_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

void block_q5_0(const BlockQ5_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  const uint32_t qh = load_unaligned<uint32_t>(b.qh);  // little-endian on every host we build for
  for (int j = 0; j < kQK5_0 / 2; ++j) {
    // Bit j of qh is the 5th bit of element j, bit j+16 that of element j+16.
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    y[j] = static_cast<float>(((b.qs[j] & 0xF) | h0) - 16) * d;
    y[j + kQK5_0 / 2] = static_cast<float>(((b.qs[j] >> 4) | h1) - 16) * d;
  }
}

// Q4_K: four chunks of 64 values; chunk c uses the low nibbles of
// qs[32c..32c+31] for sub-block 2c and the high nibbles for sub-block 2c+1.
void block_q4_k(const BlockQ4_K& b, float* y) {
  const float d = fp16_to_f32(b.d);
  const float dmin = fp16_to_f32(b.dmin);
  const uint8_t* q = b.qs;
  for (int c = 0; c < kQK_K / 64; ++c, q += 32) {
    uint8_t sc, m;
    k4_scale_min(2 * c, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    k4_scale_min(2 * c + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: as Q4_K; the 5th bit of value l in chunk c is bit 2c (low nibble
// half) or 2c+1 (high nibble half) of qh[l].
void block_q5_k(const BlockQ5_K& b, float* y) {
  const float d = fp16_to_f32(b.d);
  const float dmin = fp16_to_f32(b.dmin);
  const uint8_t* ql = b.qs;
  for (int c = 0; c < kQK_K / 64; ++c, ql += 32) {
    uint8_t sc, m;
    k4_scale_min(2 * c, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    k4_scale_min(2 * c + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c));
    const uint8_t u2 = static_cast<uint8_t>(2u << (2 * c));
    for (int l = 0; l < 32; ++l)
      *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
  }
}

// Q6_K: two halves of 128 values. In half h, value l + 32k (k = 0..3) takes
// its low 4 bits from ql[64h + l] (k = 0, 2: low/high nibble) or
// ql[64h + 32 + l] (k = 1, 3), its high 2 bits from bits 2k..2k+1 of
// qh[32h + l], and its scale from scales[8h + l/16 + 2k].
void block_q6_k(const BlockQ6_K& b, float* y) {
  const float d = fp16_to_f32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * sc[is + 0] * static_cast<float>(q1);
      y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
      y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
      y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
    }
  }
}

void block_q8_k(const BlockQ8_K& b, float* y) {
  for (int j = 0; j < kQK_K; ++j) y[j] = b.d * static_cast<float>(b.qs[j]);
}

// Runs fn(block, out) over every block of a blocked type.
template <typename Block, int kElems, typename Fn>
void each_block(const uint8_t* src, float* dst, size_t n_blocks, Fn fn) {
  for (size_t i = 0; i < n_blocks; ++i)
    fn(load_unaligned<Block>(src + i * sizeof(Block)), dst + i * kElems);
}

// Converts n plain values of storage type S with conv(S) -> float.
template <typename S, typename Conv>
void each_value(const uint8_t* src, float* dst, size_t n, Conv conv) {
  for (size_t i = 0; i < n; ++i) dst[i] = conv(load_unaligned<S>(src + i * sizeof(S)));
}

}  // namespace

void dequantize_generic(DType t, const void* src_v, float* dst, size_t n) {
  if (static_cast<int>(t) >= kDTypeCount)  // info() would index out of bounds
    fail_invalid("dequantize: unknown dtype {}", static_cast<int>(t));
  const DTypeInfo& ti = info(t);
  if (n % ti.block_elems != 0)
    fail_invalid("dequantize {}: {} elements is not a whole number of {}-element blocks",
                 ti.name, n, ti.block_elems);
  const auto* src = static_cast<const uint8_t*>(src_v);
  const size_t nb = n / ti.block_elems;
  switch (t) {
    case DType::kF32:
      if (n != 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      return each_value<uint16_t>(src, dst, n, fp16_to_f32);
    case DType::kBF16:
      return each_value<uint16_t>(src, dst, n, bf16_to_f32);
    case DType::kF8E4M3:
      return each_value<uint8_t>(src, dst, n, fp8_e4m3_to_f32);
    case DType::kI8:
      return each_value<int8_t>(src, dst, n, [](int8_t v) { return static_cast<float>(v); });
    case DType::kU8:
      return each_value<uint8_t>(src, dst, n, [](uint8_t v) { return static_cast<float>(v); });
    case DType::kI32:
      return each_value<int32_t>(src, dst, n, [](int32_t v) { return static_cast<float>(v); });
    case DType::kQ4_0:
      return each_block<BlockQ4_0, kQK4_0>(src, dst, nb, block_q4_0);
    case DType::kQ8_0:
      return each_block<BlockQ8_0, kQK8_0>(src, dst, nb, block_q8_0);
    case DType::kQ5_0:
      return each_block<BlockQ5_0, kQK5_0>(src, dst, nb, block_q5_0);
    case DType::kQ4_K:
      return each_block<BlockQ4_K, kQK_K>(src, dst, nb, block_q4_k);
    case DType::kQ5_K:
      return each_block<BlockQ5_K, kQK_K>(src, dst, nb, block_q5_k);
    case DType::kQ6_K:
      return each_block<BlockQ6_K, kQK_K>(src, dst, nb, block_q6_k);
    case DType::kQ8_K:
      return each_block<BlockQ8_K, kQK_K>(src, dst, nb, block_q8_k);
  }
  fail(ErrorKind::kInternal, "dequantize: dtype {} not handled", ti.name);
}

}  // namespace tandem::kernels
