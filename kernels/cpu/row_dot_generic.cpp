// The generic (reference) row dots: matmul.h's ggml-faithful kernels, plus
// FP8 E4M3 with block scales, which matmul.h does not take. Also the
// activation conversion, the checks and the per-level dispatch of row_dot.h,
// and the generic vec_ops.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/vec_ops.h"

namespace tandem::kernels {
namespace {

void rows_matmul(const RowDotParams& p);
void rows_fp8(const RowDotParams& p);

// The repacked layouts (weight_layout.h), the reference way: each group of
// rows back to rowmajor, each token's activations back to plain (q4_k_x4, q5_k_x4),
// then rows_matmul (rows_fp8 for fp8_x16).
void rows_repacked(const RowDotParams& p) {
  if (p.pair_w) return rows_then_pair(rows_repacked, p);
  const bool q4 = permutes_activations(p.layout);
  const LayoutBlocks blocks = layout_blocks(p.layout);
  const int gr = blocks.rows;
  const size_t row_bytes = p.w_row_stride;
  const size_t a_bytes = row_dot_activation_bytes(p.wtype, p.cols);
  std::vector<uint8_t> w(size_t(gr) * row_bytes), a(a_bytes * size_t(p.n_tokens));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    std::memcpy(a.data() + size_t(t) * a_bytes, activation_row(p, t), a_bytes);
    if (q4) q4_k_x4_unpermute_activations(a.data() + size_t(t) * a_bytes, p.cols);
  }
  std::vector<float> y(size_t(gr) * size_t(p.n_tokens));
  for (int64_t r0 = p.row_begin; r0 < p.row_end; r0 += gr) {
    unpack_group(p.layout, p.w, p.rows, p.cols, r0 / gr, w.data());
    RowDotParams q = p;
    q.layout = WeightLayout::kRowMajor;
    q.w = w.data();
    q.rows = gr;
    q.row_begin = 0;
    q.row_end = gr;
    q.a = a.data();
    q.a_rows = nullptr;
    q.a_row_bytes = a_bytes;
    q.y = y.data();
    q.y_row_stride = size_t(gr);
    if (p.wtype == DType::kF8E4M3) {  // the group's rows as rows 0..gr-1 (one scale row: gr divides 128)
      q.scales = p.scales + size_t(r0 / kFp8ScaleBlock) * p.scale_row_stride;
      if (p.fp8_marks) q.fp8_marks = p.fp8_marks + size_t(r0) * fp8_marks_row_bytes(p.cols);
      rows_fp8(q);
    } else {
      rows_matmul(q);
    }
    for (int64_t t = 0; t < p.n_tokens; ++t)
      for (int r = 0; r < gr; ++r)
        p.y[size_t(t) * p.y_row_stride + size_t(r0 + r)] = y[size_t(t) * size_t(gr) + size_t(r)];
  }
}

void rows_matmul(const RowDotParams& p) {
  if (p.layout != WeightLayout::kRowMajor) return rows_repacked(p);
  const bool f32 = p.wtype == DType::kF32;
  const size_t a_bytes = f32 ? 0 : row_dot_activation_bytes(p.wtype, p.cols);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const uint8_t* a = activation_row(p, t);
    MatmulParams m;
    m.wtype = p.wtype;
    m.w = p.w;
    m.rows = p.rows;
    m.cols = p.cols;
    m.w_row_stride = p.w_row_stride;
    m.x = f32 ? reinterpret_cast<const float*>(a) : nullptr;
    m.n_tokens = 1;
    m.x_row_stride = size_t(p.cols);
    m.y = p.y + size_t(t) * p.y_row_stride;
    m.y_row_stride = size_t(p.rows);
    m.workspace = f32 ? nullptr : const_cast<uint8_t*>(a);
    m.workspace_bytes = a_bytes;
    m.row_begin = p.row_begin;
    m.row_end = p.row_end;
    m.gemm_order = p.gemm_order;
    matmul_rows_generic(m);
  }
}

// FP8 E4M3 x bf16 activations: every FP8 value is exact in bf16, so each
// product is exact in f32; a 128-column block is summed in order, then
// multiplied by its scale and added to the row's sum.
void rows_fp8(const RowDotParams& p) {
  if (p.layout != WeightLayout::kRowMajor) return rows_repacked(p);
  for (int64_t r = p.row_begin; r < p.row_end; ++r) {
    const uint8_t* w = p.w + size_t(r) * p.w_row_stride;
    const float* s = p.scales + size_t(r / kFp8ScaleBlock) * p.scale_row_stride;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const uint8_t* a = activation_row(p, t);
      float sum = 0;
      for (int64_t c0 = 0; c0 < p.cols; c0 += kFp8ScaleBlock) {
        float block = 0;
        const int64_t c1 = std::min(p.cols, c0 + kFp8ScaleBlock);
        for (int64_t c = c0; c < c1; ++c) {
          uint16_t ab;
          std::memcpy(&ab, a + 2 * c, 2);
          block += fp8_e4m3_to_f32(w[c]) * bf16_to_f32(ab);
        }
        sum += block * s[c0 / kFp8ScaleBlock];
      }
      p.y[size_t(t) * p.y_row_stride + size_t(r)] = sum;
    }
  }
}

}  // namespace

namespace generic {
RowDotFn find(DType wtype) {
  switch (wtype) {
    case DType::kF8E4M3: return rows_fp8;
    case DType::kI8:
    case DType::kU8:
    case DType::kI32: return nullptr;
    default: return rows_matmul;
  }
}
}  // namespace generic

DType row_dot_activation_type(DType wtype) {
  if (wtype == DType::kF8E4M3) return DType::kBF16;
  return activation_type(wtype);
}

size_t row_dot_activation_bytes(DType wtype, int64_t cols) {
  const DType act = row_dot_activation_type(wtype);
  const auto w_bytes = cols < 0 ? std::nullopt : bytes_for(wtype, uint64_t(cols));
  const auto a_bytes = cols < 0 ? std::nullopt : bytes_for(act, uint64_t(cols));
  if (!w_bytes || !a_bytes || *a_bytes > std::numeric_limits<size_t>::max() - 64)
    fail_invalid("{} weights: {} columns is not a whole number of {}-value blocks of {} and {}",
                 name(wtype), cols, std::max(info(wtype).block_elems, info(act).block_elems),
                 name(wtype), name(act));
  return (size_t(*a_bytes) + 63) / 64 * 64;
}

void convert_row_dot_activations(DType wtype, const float* x, size_t x_row_stride,
                                 int64_t n_tokens, int64_t cols, uint8_t* out,
                                 size_t out_row_bytes, CpuIsa isa, WeightLayout layout) {
  const VecOps ops = vec_ops_for(isa);
  const DType act = row_dot_activation_type(wtype);
  const size_t need = row_dot_activation_bytes(wtype, cols);
  if (out_row_bytes < need)
    fail(ErrorKind::kInternal, "row dot activations: row of {} bytes, {} needed", out_row_bytes,
         need);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + size_t(t) * x_row_stride;
    uint8_t* o = out + size_t(t) * out_row_bytes;
    switch (act) {
      case DType::kF32: std::memcpy(o, xt, size_t(cols) * 4); break;
      case DType::kBF16: ops.to_bf16(xt, reinterpret_cast<uint16_t*>(o), cols); break;
      case DType::kF16: quantize_generic(act, xt, o, size_t(cols)); break;
      case DType::kQ8_0: ops.quantize_q8_0(xt, o, cols); break;
      case DType::kQ8_K: ops.quantize_q8_k(xt, o, cols); break;
      default: quantize_activations(act, xt, o, size_t(cols)); break;
    }
    if (permutes_activations(layout)) q4_k_x4_permute_activations(o, cols);
  }
}

void convert_row_dot_activations_split(DType wtype, const float* x, size_t x_row_stride,
                                       int64_t n_tokens, int64_t cols, uint8_t* out,
                                       size_t out_row_bytes, CpuIsa isa) {
  if (row_dot_activation_type(wtype) != DType::kBF16)
    fail(ErrorKind::kInternal, "row dot activations: {} weights take no split bf16 activations",
         name(wtype));
  const size_t need = row_dot_activation_bytes(wtype, cols);
  if (out_row_bytes < need)
    fail(ErrorKind::kInternal, "row dot activations: row of {} bytes, {} needed", out_row_bytes,
         need);
  const VecOps ops = vec_ops_for(isa);
  constexpr int64_t kChunk = 256;
  float rest[kChunk];
  uint16_t bf[kChunk];  // hi, then lo
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + size_t(t) * x_row_stride;
    uint8_t* o_hi = out + size_t(2 * t) * out_row_bytes;
    uint8_t* o_lo = o_hi + out_row_bytes;
    for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
      const int64_t n = std::min(kChunk, cols - c0);
      ops.to_bf16(xt + c0, bf, n);
      // x - bf16(x) is exact in f32: the low bits bf16 dropped.
      for (int64_t i = 0; i < n; ++i) {
        const float h = bf16_to_f32(bf[i]);
        rest[i] = std::isinf(h) ? 0.0f : xt[c0 + i] - h;
      }
      std::memcpy(o_hi + 2 * c0, bf, size_t(n) * 2);
      ops.to_bf16(rest, bf, n);
      std::memcpy(o_lo + 2 * c0, bf, size_t(n) * 2);
    }
  }
}

namespace {
RowDotFn find_at(CpuIsa isa, DType wtype) {
  switch (isa) {
    case CpuIsa::kAmx: return amx::find(wtype);
    case CpuIsa::kAvx512Bf16: return avx512bf16::find(wtype);
    case CpuIsa::kAvx512: return avx512::find(wtype);
    case CpuIsa::kAvx2: return avx2::find(wtype);
    case CpuIsa::kGeneric: return generic::find(wtype);
  }
  return nullptr;
}
}  // namespace

CpuIsa row_dot_level(CpuIsa isa, DType wtype) {
  for (int level = int(isa); level >= 0; --level)
    if (find_at(CpuIsa(level), wtype)) return CpuIsa(level);
  fail(ErrorKind::kUnsupported, "no row-dot kernel for {} weights", name(wtype));
}

RowDotFn row_dot_for(CpuIsa isa, DType wtype) {
  return find_at(row_dot_level(isa, wtype), wtype);
}

void row_dot_check(const RowDotParams& p) {
  const std::string_view tn = name(p.wtype);
  const size_t a_need = row_dot_activation_bytes(p.wtype, p.cols);
  const auto w_row = bytes_for(p.wtype, uint64_t(p.cols));
  if (p.rows < 0 || p.n_tokens < 0)
    fail(ErrorKind::kInternal, "row dot {}: negative sizes ({} rows, {} tokens)", tn, p.rows,
         p.n_tokens);
  if (p.row_begin < 0 || p.row_begin > p.row_end || p.row_end > p.rows)
    fail(ErrorKind::kInternal, "row dot {}: row range [{}, {}) outside [0, {})", tn, p.row_begin,
         p.row_end, p.rows);
  if (p.row_begin == p.row_end || p.n_tokens == 0) return;
  if (!p.w || !(p.a || p.a_rows) || !p.y)
    fail(ErrorKind::kInternal, "row dot {}: null pointer", tn);
  if ((p.pair_w != nullptr) != (p.pair_y != nullptr))
    fail(ErrorKind::kInternal, "row dot {}: a pair needs its weights and its output", tn);
  if (p.pair_w && !layout_takes_pairs(p.layout))
    fail(ErrorKind::kInternal, "row dot {}: layout {} takes no pair (the x4 layouts do)", tn,
         layout_name(p.layout));
  if (p.rows > 1 && p.w_row_stride < *w_row)
    fail(ErrorKind::kInternal, "row dot {}: weight row stride {} < {}", tn, p.w_row_stride,
         *w_row);
  if (!p.a_rows && p.n_tokens > 1 && p.a_row_bytes < a_need)
    fail(ErrorKind::kInternal, "row dot {}: activation row stride {} < {}", tn, p.a_row_bytes,
         a_need);
  if (p.n_tokens > 1 && p.y_row_stride < size_t(p.rows))
    fail(ErrorKind::kInternal, "row dot {}: output row stride {} < {} rows", tn, p.y_row_stride,
         p.rows);
  if (p.layout != WeightLayout::kRowMajor) {
    const int gr = layout_group_rows(p.layout);
    if (!layout_fits(p.layout, p.wtype, p.rows, p.cols) || p.row_begin % gr != 0 ||
        p.row_end % gr != 0 || p.w_row_stride != *w_row || p.gemm_order)
      fail(ErrorKind::kInternal,
           "row dot {}: layout {} needs rows in groups of {} and whole blocks, contiguous, "
           "in the GEMV order (rows [{}, {}) of {}, {} columns, row stride {})",
           tn, layout_name(p.layout), gr, p.row_begin, p.row_end, p.rows, p.cols, p.w_row_stride);
  }
  if (p.wtype == DType::kF8E4M3) {
    const size_t blocks = size_t((p.cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock);
    if (!p.scales) fail(ErrorKind::kInternal, "row dot f8_e4m3: no block scales");
    if (p.rows > kFp8ScaleBlock && p.scale_row_stride < blocks)
      fail(ErrorKind::kInternal, "row dot f8_e4m3: scale row stride {} < {} blocks",
           p.scale_row_stride, blocks);
  } else if (p.fp8_marks) {
    fail(ErrorKind::kInternal, "row dot {}: FP8 marks for weights of another type", tn);
  }
}

}  // namespace tandem::kernels

// ---- vec_ops.h: the generic variants and the per-level choice --------------------

namespace tandem::kernels {
namespace generic {
namespace {
void swiglu(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}
void to_bf16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}
void quantize_q8_0(const float* x, uint8_t* out, int64_t n) {
  quantize_activations(DType::kQ8_0, x, out, size_t(n));
}
void quantize_q8_k(const float* x, uint8_t* out, int64_t n) {
  quantize_activations(DType::kQ8_K, x, out, size_t(n));
}
// Never an fma, whatever -march this file is built with.
__attribute__((optimize("fp-contract=off"))) void add_scaled(float* y, const float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
}  // namespace
VecOps vec_ops() { return {swiglu, to_bf16, quantize_q8_0, quantize_q8_k, add_scaled}; }
}  // namespace generic

VecOps vec_ops_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx:  // no vector ops of its own
    case CpuIsa::kAvx512Bf16: return avx512bf16::vec_ops();
    case CpuIsa::kAvx512: return avx512::vec_ops();
    case CpuIsa::kAvx2: return avx2::vec_ops();
    case CpuIsa::kGeneric: break;
  }
  return generic::vec_ops();
}

}  // namespace tandem::kernels
