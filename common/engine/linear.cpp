#include "common/engine/linear.h"

#include "kernels/cpu/matmul.h"

namespace tandem::engine {

void Linear::operator()(const MatrixView& w, const float* x, int64_t n_tokens, float* y,
                        bool accumulate) {
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
