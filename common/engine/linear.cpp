#include "common/engine/linear.h"

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/row_dot.h"

namespace tandem::engine {

void Linear::operator()(const MatrixView& w, const float* x, int64_t n_tokens, float* y,
                        bool accumulate) {
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
    p.a = a;
    p.a_row_bytes = row;
    p.n_tokens = n_tokens;
    p.y = out;
    p.y_row_stride = size_t(w.rows);
    p.row_begin = 0;
    p.row_end = w.rows;
    kernels::row_dot_check(p);
    kernels::row_dot_for(isa_, w.dtype)(p);
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
  p.x = x;
  p.n_tokens = n_tokens;
  p.x_row_stride = size_t(w.cols);
  p.y = y;
  p.y_row_stride = size_t(w.rows);
  p.accumulate = accumulate;
  p.f32_activations = w.f32_activations;
  size_t need = kernels::matmul_workspace_bytes(w.dtype, w.cols, n_tokens, w.f32_activations);
  if (workspace_.size() < need) workspace_.resize(need);
  p.workspace = workspace_.data();
  p.workspace_bytes = workspace_.size();
  kernels::matmul_generic(p);
}

}  // namespace tandem::engine
