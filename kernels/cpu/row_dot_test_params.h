// Helpers the layout tests share (weight_layout_test.cpp, fp8_x16_test.cpp):
// random activations and rowmajor row-dot calls to compare layouts against.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/row_dot.h"

namespace tandem::kernels::testing {

inline std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  return x;
}

// The activation rows of a (ab bytes apart), gathered in reverse token order.
inline std::vector<const uint8_t*> reversed_rows(const std::vector<uint8_t>& a, size_t ab, int64_t tokens) {
  std::vector<const uint8_t*> rows;
  for (int64_t t = tokens - 1; t >= 0; --t) rows.push_back(a.data() + size_t(t) * ab);
  return rows;
}

// Rowmajor weights w (rows x cols) against `tokens` activation rows a (ab
// bytes apart), rows [r0, r1), into an output with one spare row per token.
inline RowDotParams rowmajor_params(DType type, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                             const uint8_t* a, size_t ab, int64_t tokens, int64_t r0, int64_t r1) {
  RowDotParams p;
  p.wtype = type;
  p.w = w;
  p.w_row_stride = row_bytes;
  p.rows = rows;
  p.cols = cols;
  p.a = a;
  p.a_row_bytes = ab;
  p.n_tokens = tokens;
  p.y_row_stride = size_t(rows + 1);
  p.row_begin = r0;
  p.row_end = r1;
  return p;
}

}  // namespace tandem::kernels::testing
