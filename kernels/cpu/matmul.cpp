#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/f32_dot.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quantize.h"

namespace tandem::kernels {
namespace {


float half_at(const uint8_t* p) {
  return fp16_to_f32(load_unaligned<uint16_t>(p));
}

// One dot product: a weight row against one converted activation row, both
// `cols` values long. Returns what ggml would (summation order: matmul.h).
using RowDot = float (*)(const uint8_t* w, const uint8_t* a, int64_t cols);

// ---- plain float types ------------------------------------------------------

float dot_f32(const uint8_t* w, const uint8_t* a, int64_t n) {
  F32Dot dot(n);
  for (int64_t i = 0; i < n; ++i) dot.add(load_unaligned<float>(w + 4 * i), load_unaligned<float>(a + 4 * i));
  return dot.result();
}

// ggml_vec_dot_f16: the products of two fp16 are exact in f32, summed as
// ggml_vec_dot_f32 sums.
float dot_f16(const uint8_t* w, const uint8_t* a, int64_t n) {
  F32Dot dot(n);
  for (int64_t i = 0; i < n; ++i)
    dot.add(fp16_to_f32(load_unaligned<uint16_t>(w + 2 * i)), fp16_to_f32(load_unaligned<uint16_t>(a + 2 * i)));
  return dot.result();
}

// ggml_vec_dot_bf16 (AVX-512 BF16's dot-product instruction, see Bf16Dot).
float dot_bf16(const uint8_t* w, const uint8_t* a, int64_t n) {
  Bf16Dot dot(n);
  auto at = [](const uint8_t* p, int64_t i) { return bf16_to_f32(load_unaligned<uint16_t>(p + 2 * i)); };
  int64_t i = 0;
  for (; i + 1 < n; i += 2) dot.add_pair(at(w, i), at(a, i), at(w, i + 1), at(a, i + 1));
  if (i < n) dot.add_pair(at(w, i), at(a, i), 0.0f, 0.0f);  // odd n: a lone tail value
  return dot.result();
}

// llama.cpp's tinyBLAS on AVX-512 BF16 (llamafile_sgemm), which takes a BF16
// MUL_MAT of 2 or more tokens when the row length is a multiple of 32: one
// 16-lane vdpbf16ps accumulator over the whole row (lane j adds the
// products of values 2j+1 and 2j of every 32, rounding after each), reduced
// at the end as _mm512_reduce_add_ps.
float dot_bf16_tinyblas(const uint8_t* w, const uint8_t* a, int64_t n) {
  auto at = [](const uint8_t* p, int64_t i) { return bf16_to_f32(load_unaligned<uint16_t>(p + 2 * i)); };
  float acc[16] = {};
  for (int64_t i = 0; i + 1 < n; i += 2) {
    float& lane = acc[(i % 32) / 2];
    lane += at(w, i + 1) * at(a, i + 1);
    lane += at(w, i) * at(a, i);
  }
  return reduce16(acc);
}

// ---- 32-value blocks against Q8_0 activations -------------------------------

constexpr size_t kQ8_0Qs = offsetof(BlockQ8_0, qs);

// ggml's x86 reduction of a row: 8 f32 lanes, lane k holding the products
// of values 4k..4k+3 of every 32 (an exact int32 per block), accumulated by
// fma with the block scale; then hsum_float_8's pairwise order.
struct Lanes8 {
  float acc[8] = {};
  void fma_block(float d, const int32_t isum[8]) {
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(isum[k]), acc[k]);
  }
  float hsum() const {
    float r[4];
    for (int k = 0; k < 4; ++k) r[k] = acc[k + 4] + acc[k];
    return (r[0] + r[2]) + (r[1] + r[3]);
  }
};

// ggml_vec_dot_q8_0_q8_0: sumi * (d_w * d_x).
float dot_q8_0(const uint8_t* w, const uint8_t* a, int64_t n) {
  Lanes8 lanes;
  for (int64_t ib = 0; ib < n / kQK8_0; ++ib, w += sizeof(BlockQ8_0), a += sizeof(BlockQ8_0)) {
    const auto* qw = reinterpret_cast<const int8_t*>(w + kQ8_0Qs);
    const auto* qa = reinterpret_cast<const int8_t*>(a + kQ8_0Qs);
    int32_t isum[8] = {};
    for (int j = 0; j < kQK8_0; ++j) isum[j / 4] += qw[j] * qa[j];
    lanes.fma_block(half_at(w) * half_at(a), isum);
  }
  return lanes.hsum();
}

// ggml_vec_dot_q4_0_q8_0: weights (nibble - 8); low nibbles are values 0-15,
// high nibbles 16-31. On x86 the same 8 lanes as Q8_0, scaled d_w * d_x.
float dot_q4_0(const uint8_t* w, const uint8_t* a, int64_t n) {
  Lanes8 lanes;
  for (int64_t ib = 0; ib < n / kQK4_0; ++ib, w += sizeof(BlockQ4_0), a += sizeof(BlockQ8_0)) {
    const uint8_t* qw = w + offsetof(BlockQ4_0, qs);
    const auto* qa = reinterpret_cast<const int8_t*>(a + kQ8_0Qs);
    int32_t isum[8] = {};
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      isum[j / 4] += ((qw[j] & 0xF) - 8) * qa[j];
      isum[(j + kQK4_0 / 2) / 4] += ((qw[j] >> 4) - 8) * qa[j + kQK4_0 / 2];
    }
    lanes.fma_block(half_at(w) * half_at(a), isum);
  }
  return lanes.hsum();
}

// ggml_vec_dot_q5_0_q8_0: weights ((nibble | 5th bit << 4) - 16), the 5th bit
// of value j being bit j of the little-endian qh. On x86 the same 8 lanes as
// Q8_0, scaled d_w * d_x.
float dot_q5_0(const uint8_t* w, const uint8_t* a, int64_t n) {
  Lanes8 lanes;
  for (int64_t ib = 0; ib < n / kQK5_0; ++ib, w += sizeof(BlockQ5_0), a += sizeof(BlockQ8_0)) {
    const uint32_t qh = load_unaligned<uint32_t>(w + offsetof(BlockQ5_0, qh));
    const uint8_t* qw = w + offsetof(BlockQ5_0, qs);
    const auto* qa = reinterpret_cast<const int8_t*>(a + kQ8_0Qs);
    int32_t isum[8] = {};
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      isum[j / 4] += (((qw[j] & 0xF) | h0) - 16) * qa[j];
      isum[(j + kQK5_0 / 2) / 4] += (((qw[j] >> 4) | h1) - 16) * qa[j + kQK5_0 / 2];
    }
    lanes.fma_block(half_at(w) * half_at(a), isum);
  }
  return lanes.hsum();
}

// ---- 256-value super-blocks against Q8_K activations ------------------------

// Fields of a Q8_K activation block.
struct Q8KView {
  float d;
  const int8_t* qs;
  int16_t bsums[kQK_K / 16];
  explicit Q8KView(const uint8_t* a)
      : d(load_unaligned<float>(a + offsetof(BlockQ8_K, d))),
        qs(reinterpret_cast<const int8_t*>(a + offsetof(BlockQ8_K, qs))) {
    std::memcpy(bsums, a + offsetof(BlockQ8_K, bsums), sizeof(bsums));
  }
};

// llama.cpp's repacked Q4_K GEMV (ggml_gemv_q4_K_8x8_q8_K), which on x86
// takes every MUL_MAT_ID token and a MUL_MAT's tokens past n - n % 4: per
// super-block one exact integer sum of the scaled dots and one of the scaled
// mins, each added with its own fused multiply-add; the two sums are
// subtracted at the end. Chunk c (64 values) of the weights: low nibbles of
// qs[32c..32c+31] are sub-block 2c, high nibbles sub-block 2c+1.
float dot_q4_k(const uint8_t* w, const uint8_t* a, int64_t n) {
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t ib = 0; ib < n / kQK_K; ++ib, w += sizeof(BlockQ4_K), a += sizeof(BlockQ8_K)) {
    const Q8KView x(a);
    const uint8_t* qs = w + offsetof(BlockQ4_K, qs);
    const uint8_t* scales = w + offsetof(BlockQ4_K, scales);
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < kQK_K / 32; ++j) {
      uint8_t sc, m;
      k4_scale_min(j, scales, &sc, &m);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) * x.qs[32 * j + l];
      isum += sc * s;
      imin += m * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
    }
    acc = std::fma(static_cast<float>(isum), half_at(w + offsetof(BlockQ4_K, d)) * x.d, acc);
    acc_min = std::fma(static_cast<float>(imin), half_at(w + offsetof(BlockQ4_K, dmin)) * x.d, acc_min);
  }
  return acc - acc_min;
}

// The same dot as llama.cpp's repacked Q4_K GEMM (ggml_gemm_q4_K_8x8_q8_K)
// sums it, for tokens it takes in groups of four: each 64-value chunk
// (sub-blocks 2c, 2c+1) is scaled and added with its own fused multiply-add,
// the mins likewise, and the two sums are subtracted at the end.
float dot_q4_k_grouped(const uint8_t* w, const uint8_t* a, int64_t n) {
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t ib = 0; ib < n / kQK_K; ++ib, w += sizeof(BlockQ4_K), a += sizeof(BlockQ8_K)) {
    const Q8KView x(a);
    const uint8_t* qs = w + offsetof(BlockQ4_K, qs);
    const uint8_t* scales = w + offsetof(BlockQ4_K, scales);
    const float d = half_at(w + offsetof(BlockQ4_K, d)) * x.d;
    const float dmin = half_at(w + offsetof(BlockQ4_K, dmin)) * x.d;
    for (int c = 0; c < kQK_K / 64; ++c) {
      int32_t isum = 0, imin = 0;
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * c + h;
        uint8_t sc, m;
        k4_scale_min(j, scales, &sc, &m);
        int32_t s = 0;
        for (int l = 0; l < 32; ++l) s += ((qs[32 * c + l] >> (4 * h)) & 0xF) * x.qs[32 * j + l];
        isum += sc * s;
        imin += m * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
      }
      acc = std::fma(static_cast<float>(isum), d, acc);
      acc_min = std::fma(static_cast<float>(imin), dmin, acc_min);
    }
  }
  return acc - acc_min;
}

// ggml_vec_dot_q5_K_q8_K (x86): as Q4_K, plus 16 for value l of sub-block
// 2c (2c+1) when bit 2c (2c+1) of qh[l] is set. ggml's AVX2 order: lane k of
// 8 int32 lanes sums bytes 4k..4k+3 of every 32-value sub-block times its
// scale, fma'd into 8 f32 lanes with d_x*d_w per super-block; the mins are
// one exact sum per super-block, fma'd with -d_x*dmin_w into a scalar that
// is added to the lanes' horizontal sum at the end.
float dot_q5_k(const uint8_t* w, const uint8_t* a, int64_t n) {
  Lanes8 lanes;
  float summs = 0.0f;
  for (int64_t ib = 0; ib < n / kQK_K; ++ib, w += sizeof(BlockQ5_K), a += sizeof(BlockQ8_K)) {
    const Q8KView x(a);
    const uint8_t* qs = w + offsetof(BlockQ5_K, qs);
    const uint8_t* qh = w + offsetof(BlockQ5_K, qh);
    const uint8_t* scales = w + offsetof(BlockQ5_K, scales);
    int32_t isum[8] = {}, imin = 0;
    for (int j = 0; j < kQK_K / 32; ++j) {
      uint8_t sc, m;
      k4_scale_min(j, scales, &sc, &m);
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) | (((qh[l] >> j) & 1) << 4);
        isum[l / 4] += sc * q * x.qs[32 * j + l];
      }
      imin += m * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
    }
    lanes.fma_block(x.d * half_at(w + offsetof(BlockQ5_K, d)), isum);
    summs = std::fma(-x.d * half_at(w + offsetof(BlockQ5_K, dmin)), static_cast<float>(imin), summs);
  }
  return lanes.hsum() + summs;
}

// ggml_vec_dot_q6_K_q8_K (x86): value l + 32k (k = 0..3) of half h takes its
// low nibble from ql[64h + l] (k = 0: low, 2: high) or ql[64h + 32 + l]
// (k = 1: low, 3: high) and bits 2k..2k+1 of qh[32h + l] as bits 4-5; minus
// 32. Sub-block j (16 values) is scaled by the int8 scales[j]. ggml's AVX2
// order: lane k of 8 int32 lanes sums bytes 4k..4k+3 of every 32 values,
// fma'd into 8 f32 lanes with d_x*d_w per super-block, summed at the end.
float dot_q6_k(const uint8_t* w, const uint8_t* a, int64_t n) {
  Lanes8 lanes;
  for (int64_t ib = 0; ib < n / kQK_K; ++ib, w += sizeof(BlockQ6_K), a += sizeof(BlockQ8_K)) {
    const uint8_t* ql = w + offsetof(BlockQ6_K, ql);
    const uint8_t* qh = w + offsetof(BlockQ6_K, qh);
    const auto* scales = reinterpret_cast<const int8_t*>(w + offsetof(BlockQ6_K, scales));
    int8_t q[kQK_K];
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = ql[64 * h + l], hi = ql[64 * h + 32 + l], b = qh[32 * h + l];
        int8_t* o = q + 128 * h + l;
        o[0] = static_cast<int8_t>(((lo & 0xF) | (((b >> 0) & 3) << 4)) - 32);
        o[32] = static_cast<int8_t>(((hi & 0xF) | (((b >> 2) & 3) << 4)) - 32);
        o[64] = static_cast<int8_t>(((lo >> 4) | (((b >> 4) & 3) << 4)) - 32);
        o[96] = static_cast<int8_t>(((hi >> 4) | (((b >> 6) & 3) << 4)) - 32);
      }
    }
    const Q8KView x(a);
    int32_t isum[8] = {};
    for (int i = 0; i < kQK_K; ++i) isum[(i % 32) / 4] += scales[i / 16] * q[i] * x.qs[i];
    lanes.fma_block(x.d * half_at(w + offsetof(BlockQ6_K, d)), isum);
  }
  return lanes.hsum();
}

// Q8_K weights (not a GGUF weight type in practice): d_w*d_x * sum q_w*q_x.
float dot_q8_k(const uint8_t* w, const uint8_t* a, int64_t n) {
  double sum = 0.0;
  for (int64_t ib = 0; ib < n / kQK_K; ++ib, w += sizeof(BlockQ8_K), a += sizeof(BlockQ8_K)) {
    const auto* qw = reinterpret_cast<const int8_t*>(w + offsetof(BlockQ8_K, qs));
    const auto* qa = reinterpret_cast<const int8_t*>(a + offsetof(BlockQ8_K, qs));
    int32_t isum = 0;
    for (int j = 0; j < kQK_K; ++j) isum += qw[j] * qa[j];
    const float d = load_unaligned<float>(w) * load_unaligned<float>(a);
    sum += static_cast<double>(d * static_cast<float>(isum));
  }
  return static_cast<float>(sum);
}

// ---- any weight type against f32 activations --------------------------------

// The weights decoded 256 values at a time (a whole number of blocks of every
// type) and multiplied in f32 like dot_f32, so a BF16 or quantised matrix
// gives exactly what its dequantised F32 copy gives.
template <DType T>
float dot_exact(const uint8_t* w, const uint8_t* a, int64_t n) {
  constexpr int64_t kChunk = 256;
  const size_t chunk_bytes = static_cast<size_t>(*bytes_for(T, kChunk));
  float wf[kChunk];
  F32Dot dot(n);
  for (int64_t i0 = 0; i0 < n; i0 += kChunk, w += chunk_bytes) {
    const int64_t m = std::min(kChunk, n - i0);
    dequantize_generic(T, w, wf, static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) dot.add(wf[i], load_unaligned<float>(a + 4 * (i0 + i)));
  }
  return dot.result();
}

// ---- dispatch and validation --------------------------------------------------

struct Kernel {
  DType act;
  RowDot dot;
};

Kernel kernel_for(DType t);

RowDot exact_dot_for(DType t) {
  switch (t) {
    case DType::kF16: return dot_exact<DType::kF16>;
    case DType::kBF16: return dot_exact<DType::kBF16>;
    case DType::kQ8_0: return dot_exact<DType::kQ8_0>;
    case DType::kQ4_0: return dot_exact<DType::kQ4_0>;
    case DType::kQ5_0: return dot_exact<DType::kQ5_0>;
    case DType::kQ4_K: return dot_exact<DType::kQ4_K>;
    case DType::kQ5_K: return dot_exact<DType::kQ5_K>;
    case DType::kQ6_K: return dot_exact<DType::kQ6_K>;
    case DType::kQ8_K: return dot_exact<DType::kQ8_K>;
    default: return dot_f32;
  }
}

Kernel kernel_for(DType t, bool f32_activations) {
  Kernel k = kernel_for(t);
  if (f32_activations) k = {DType::kF32, exact_dot_for(t)};
  return k;
}

Kernel kernel_for(DType t) {
  switch (t) {
    case DType::kF32:
      return {DType::kF32, dot_f32};
    case DType::kF16:
      return {DType::kF16, dot_f16};
    case DType::kBF16:
      return {DType::kBF16, dot_bf16};
    case DType::kQ8_0:
      return {DType::kQ8_0, dot_q8_0};
    case DType::kQ4_0:
      return {DType::kQ8_0, dot_q4_0};
    case DType::kQ5_0:
      return {DType::kQ8_0, dot_q5_0};
    case DType::kQ4_K:
      return {DType::kQ8_K, dot_q4_k};
    case DType::kQ5_K:
      return {DType::kQ8_K, dot_q5_k};
    case DType::kQ6_K:
      return {DType::kQ8_K, dot_q6_k};
    case DType::kQ8_K:
      return {DType::kQ8_K, dot_q8_k};
    case DType::kF8E4M3:
    case DType::kI8:
    case DType::kU8:
    case DType::kI32:
      break;
  }
  if (static_cast<int>(t) >= kDTypeCount)
    fail_invalid("matmul: unknown weight dtype {}", static_cast<int>(t));
  fail(ErrorKind::kUnsupported, "matmul: no kernel for {} weights", name(t));
}

// Bytes of one converted activation row; 0 for F32 (read in place).
// Checks cols against the weight type's block size.
size_t act_row_bytes(DType wtype, const Kernel& k, int64_t cols) {
  if (cols < 0) fail_invalid("matmul {}: negative column count {}", name(wtype), cols);
  const uint32_t block = info(wtype).block_elems;
  if (static_cast<uint64_t>(cols) % block != 0)
    fail_invalid("matmul {}: {} columns is not a whole number of {}-value blocks", name(wtype),
                 cols, block);
  if (k.act == DType::kF32) return 0;
  const auto bytes = bytes_for(k.act, static_cast<uint64_t>(cols));
  if (!bytes || *bytes > std::numeric_limits<size_t>::max())
    fail_invalid("matmul {}: activation row of {} values overflows", name(wtype), cols);
  return static_cast<size_t>(*bytes);
}

size_t workspace_for(DType wtype, const Kernel& k, int64_t cols, int64_t n_tokens) {
  const size_t row = act_row_bytes(wtype, k, cols);
  if (n_tokens < 0) fail_invalid("matmul {}: negative token count {}", name(wtype), n_tokens);
  if (row != 0 && static_cast<uint64_t>(n_tokens) > std::numeric_limits<size_t>::max() / row)
    fail_invalid("matmul {}: workspace for {} tokens of {} values overflows", name(wtype), n_tokens,
                 cols);
  return row * static_cast<size_t>(n_tokens);
}

struct Plan {
  Kernel k;
  size_t act_row;  // bytes per converted activation row (0: F32, read x)
  int64_t row_begin, row_end;
};

// Checks the sizes and the workspace; need_x: also x (step 1, and step 2
// of F32 weights, which reads x in place); with_output: also what step 2
// needs (w, y, the row range).
Plan validate(const MatmulParams& p, bool need_x, bool with_output) {
  Plan plan{kernel_for(p.wtype, p.f32_activations), 0, 0, 0};
  const std::string_view tn = name(p.wtype);
  const size_t ws_need = workspace_for(p.wtype, plan.k, p.cols, p.n_tokens);
  plan.act_row = act_row_bytes(p.wtype, plan.k, p.cols);
  if (p.rows < 0) fail_invalid("matmul {}: negative row count {}", tn, p.rows);
  if (need_x || plan.k.act == DType::kF32) {
    if (p.n_tokens > 0 && p.cols > 0 && p.x == nullptr)
      fail(ErrorKind::kInternal, "matmul {}: null activations", tn);
    if (p.n_tokens > 1 && p.x_row_stride < static_cast<size_t>(p.cols))
      fail(ErrorKind::kInternal, "matmul {}: activation row stride {} < {} columns", tn,
           p.x_row_stride, p.cols);
  }
  if (p.workspace_bytes < ws_need || (ws_need != 0 && p.workspace == nullptr))
    fail(ErrorKind::kInternal, "matmul {}: workspace of {} bytes, {} needed ({} tokens x {} cols)",
         tn, p.workspace == nullptr ? 0 : p.workspace_bytes, ws_need, p.n_tokens, p.cols);
  if (!with_output) return plan;

  plan.row_begin = p.row_begin;
  plan.row_end = p.row_end == -1 ? p.rows : p.row_end;
  if (plan.row_begin < 0 || plan.row_begin > plan.row_end || plan.row_end > p.rows)
    fail(ErrorKind::kInternal, "matmul {}: row range [{}, {}) outside [0, {})", tn, p.row_begin,
         p.row_end, p.rows);
  const int64_t n_rows = plan.row_end - plan.row_begin;
  if (n_rows == 0 || p.n_tokens == 0) return plan;
  if (p.y == nullptr) fail(ErrorKind::kInternal, "matmul {}: null output", tn);
  if (p.n_tokens > 1 && p.y_row_stride < static_cast<size_t>(p.rows))
    fail(ErrorKind::kInternal, "matmul {}: output row stride {} < {} rows", tn, p.y_row_stride,
         p.rows);
  if (p.cols > 0) {
    if (p.w == nullptr) fail(ErrorKind::kInternal, "matmul {}: null weights", tn);
    const auto w_row = bytes_for(p.wtype, static_cast<uint64_t>(p.cols));
    if (!w_row) fail_invalid("matmul {}: weight row of {} values overflows", tn, p.cols);
    if (p.rows > 1 && p.w_row_stride < *w_row)
      fail(ErrorKind::kInternal, "matmul {}: weight row stride {} < {} bytes per row", tn,
           p.w_row_stride, *w_row);
  }
  return plan;
}

void convert(const MatmulParams& p, const Plan& plan) {
  if (plan.act_row == 0) return;  // F32 weights, or nothing to convert
  auto* ws = static_cast<uint8_t*>(p.workspace);
  for (int64_t t = 0; t < p.n_tokens; ++t)
    quantize_activations(plan.k.act, p.x + static_cast<size_t>(t) * p.x_row_stride,
                         ws + static_cast<size_t>(t) * plan.act_row, static_cast<size_t>(p.cols));
}

void rows(const MatmulParams& p, const Plan& plan) {
  const auto* w = static_cast<const uint8_t*>(p.w);
  const bool in_place = plan.k.act == DType::kF32;
  const auto* a_base =
      in_place ? reinterpret_cast<const uint8_t*>(p.x) : static_cast<const uint8_t*>(p.workspace);
  const size_t a_stride = in_place ? p.x_row_stride * sizeof(float) : plan.act_row;
  RowDot dot = plan.k.dot;
  if (p.gemm_order && dot == dot_q4_k) dot = dot_q4_k_grouped;
  if (p.gemm_order && dot == dot_bf16) dot = dot_bf16_tinyblas;
  for (int64_t r = plan.row_begin; r < plan.row_end; ++r) {
    const uint8_t* wr = w == nullptr ? nullptr : w + static_cast<size_t>(r) * p.w_row_stride;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const float v = p.cols == 0 ? 0.0f : dot(wr, a_base + static_cast<size_t>(t) * a_stride, p.cols);
      float& out = p.y[static_cast<size_t>(t) * p.y_row_stride + static_cast<size_t>(r)];
      out = p.accumulate ? out + v : v;
    }
  }
}

}  // namespace

DType activation_type(DType weight_type) {
  return kernel_for(weight_type).act;
}

size_t matmul_workspace_bytes(DType weight_type, int64_t cols, int64_t n_tokens,
                              bool f32_activations) {
  return workspace_for(weight_type, kernel_for(weight_type, f32_activations), cols, n_tokens);
}

void convert_activations(const MatmulParams& p) {
  convert(p, validate(p, true, false));
}

void matmul_rows_generic(const MatmulParams& p) {
  rows(p, validate(p, false, true));
}

void matmul_generic(const MatmulParams& p) {
  const Plan plan = validate(p, true, true);
  convert(p, plan);
  rows(p, plan);
}

}  // namespace tandem::kernels
