#include "common/engine/linear.h"

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/row_dot.h"

namespace tandem::engine {

namespace {

// The tokens llama.cpp multiplies with a GEMM, whose sums we reproduce on
// request (kernels/cpu/matmul.h, gemm_order): the first n - n % 4 tokens of
// a MUL_MAT with a repacked Q4_K matrix (row count a multiple of 8); all n
// of a BF16 one when n >= 2 and the rows' length is a multiple of 32
// (tinyBLAS). F32 matrices, which llama.cpp also sends through tinyBLAS,
// keep vec_dot's order for every batch: a prompt in one pass then equals
// the same tokens one at a time to 1e-4 (issue 3's F32 bound), and the f32
// fixtures stay within 0.003 of llama.cpp.
int64_t gemm_order_tokens(const MatrixView& w, int64_t n_tokens) {
  if (w.f32_activations) return 0;
  if (w.dtype == DType::kQ4_K && w.rows % 8 == 0) return n_tokens - n_tokens % 4;
  if (w.dtype == DType::kBF16 && w.cols % 32 == 0 && n_tokens >= 2) return n_tokens;
  return 0;
}

// Calls multiply(t0, t1, gemm_order) for the non-empty token ranges
// [0, gemm_tokens) (in that order) and [gemm_tokens, n_tokens).
template <class Multiply>
void by_order(int64_t gemm_tokens, int64_t n_tokens, Multiply multiply) {
  if (gemm_tokens > 0) multiply(int64_t{0}, gemm_tokens, true);
  if (gemm_tokens < n_tokens) multiply(gemm_tokens, n_tokens, false);
}

}  // namespace

void Linear::operator()(const MatrixView& w, const float* x, int64_t n_tokens, float* y,
                        bool accumulate) {
  const int64_t gemm_tokens = gemm_order_tokens(w, n_tokens);
  if (isa_ != kernels::CpuIsa::kGeneric && !w.f32_activations &&
      kernels::row_dot_level(isa_, w.dtype) != kernels::CpuIsa::kGeneric) {
    const size_t row = kernels::row_dot_activation_bytes(w.dtype, w.cols);
    if (workspace_.size() < row * size_t(n_tokens)) workspace_.resize(row * size_t(n_tokens));
    auto* a = reinterpret_cast<uint8_t*>(workspace_.data());
    kernels::convert_row_dot_activations(w.dtype, x, size_t(w.cols), n_tokens, w.cols, a, row, isa_);
    float* out = y;
    if (accumulate) {
      sum_.resize(size_t(n_tokens * w.rows));
      out = sum_.data();
    }
    kernels::RowDotParams p;
    p.wtype = w.dtype;
    p.w = reinterpret_cast<const uint8_t*>(w.data);
    p.w_row_stride = w.row_stride;
    p.rows = w.rows;
    p.cols = w.cols;
    p.a_row_bytes = row;
    p.y_row_stride = size_t(w.rows);
    p.row_begin = 0;
    p.row_end = w.rows;
    const kernels::RowDotFn fn = kernels::row_dot_for(isa_, w.dtype);
    by_order(gemm_tokens, n_tokens, [&](int64_t t0, int64_t t1, bool gemm_order) {
      p.a = a + size_t(t0) * row;
      p.n_tokens = t1 - t0;
      p.y = out + size_t(t0) * size_t(w.rows);
      p.gemm_order = gemm_order;
      kernels::row_dot_check(p);
      fn(p);
    });
    if (accumulate)
      for (size_t i = 0; i < sum_.size(); ++i) y[i] += sum_[i];
    return;
  }
  kernels::MatmulParams p;
  p.wtype = w.dtype;
  p.w = w.data;
  p.rows = w.rows;
  p.cols = w.cols;
  p.w_row_stride = w.row_stride;
  p.x_row_stride = size_t(w.cols);
  p.y_row_stride = size_t(w.rows);
  p.accumulate = accumulate;
  p.f32_activations = w.f32_activations;
  size_t need = kernels::matmul_workspace_bytes(w.dtype, w.cols, n_tokens, w.f32_activations);
  if (workspace_.size() < need) workspace_.resize(need);
  p.workspace = workspace_.data();
  p.workspace_bytes = workspace_.size();
  by_order(gemm_tokens, n_tokens, [&](int64_t t0, int64_t t1, bool gemm_order) {
    p.x = x + size_t(t0) * size_t(w.cols);
    p.n_tokens = t1 - t0;
    p.y = y + size_t(t0) * size_t(w.rows);
    p.gemm_order = gemm_order;
    kernels::matmul_generic(p);
  });
}

}  // namespace tandem::engine
