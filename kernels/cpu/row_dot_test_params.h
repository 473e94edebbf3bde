// Helpers the layout tests share (weight_layout_test.cpp, fp8_x16_test.cpp,
// q8_0_x16_test.cpp and others): random activations, rowmajor row-dot calls
// to compare layouts against, and the checks the x16 layouts' tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/row_dot.h"

namespace tandem::kernels::testing {

// `rows` rows of `cols` Gaussian values quantised to `type` (rowmajor), their
// scale growing with the row, one value a row 8 times larger (large scales
// and mins too).
inline std::vector<uint8_t> random_rows(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t row_bytes = *bytes_for(type, uint64_t(cols));
  std::vector<uint8_t> w(row_bytes * size_t(rows));
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = nd(rng) * float(1 + r % 5);
    row[size_t(r % cols)] *= 8;  // large scales and mins too
    quantize_generic(type, row.data(), w.data() + size_t(r) * row_bytes, row.size());
  }
  return w;
}

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

// `tokens` rows of random activations converted for weights of `type`, ab
// bytes apart.
struct Activations {
  size_t ab;
  std::vector<uint8_t> bytes;
  const uint8_t* row(int64_t t) const { return bytes.data() + ab * size_t(t); }
};
inline Activations random_activations(DType type, int64_t tokens, int64_t cols, std::mt19937& rng) {
  Activations a{row_dot_activation_bytes(type, cols), {}};
  a.bytes.resize(a.ab * size_t(tokens));
  const std::vector<float> x = random_x(tokens * cols, rng);
  convert_row_dot_activations(type, x.data(), size_t(cols), tokens, cols, a.bytes.data(), a.ab);
  return a;
}

// y, from the call p (its tokens in reverse order when `reversed`), against
// ref, the reference's outputs for the tokens in order: every row of the
// output rows (p.rows + 1: rowmajor_params's spare one) outside [row_begin,
// row_end) still -7, the others finite and within bound * abs_dot(token,
// row) (sum |w * x| of that token as ref numbers it) of ref. worst keeps the
// largest |y - ref| / abs_dot seen.
template <class AbsDot>
::testing::AssertionResult agrees_within(const RowDotParams& p, const std::vector<float>& y,
                                         const std::vector<float>& ref, bool reversed, double bound, AbsDot abs_dot,
                                         double& worst) {
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const int64_t src = reversed ? p.n_tokens - 1 - t : t;
    for (int64_t r = 0; r < p.rows + 1; ++r) {
      const size_t i = size_t(t) * p.y_row_stride + size_t(r);
      if (r < p.row_begin || r >= p.row_end) {
        if (y[i] != -7.0f) return ::testing::AssertionFailure() << "wrote outside its rows: row " << r;
        continue;
      }
      const float want = ref[size_t(src) * p.y_row_stride + size_t(r)];
      const double s = abs_dot(src, r), d = std::fabs(double(y[i]) - double(want));
      if (!std::isfinite(y[i]) || d > bound * s + 1e-30)
        return ::testing::AssertionFailure() << "row " << r << " token " << t << ": " << y[i] << " vs " << want
                                             << " (bound " << bound * s << ")";
      if (s > 0) worst = std::max(worst, d / s);
    }
  }
  return ::testing::AssertionSuccess();
}

// One token's floats at `isa` do not depend on the tokens beside it nor on
// where a call's rows start: params(t0, n, r0, r1) makes the call (without
// its y) for tokens t0..t0 + n - 1 over rows [r0, r1); every batch size in
// `batches` and every range in `cuts` must give each token the floats of
// one call over all `tokens` and rows [0, rows).
template <class Params>
::testing::AssertionResult same_floats_in_any_batch_and_cut(CpuIsa isa, int64_t rows, int64_t tokens,
                                                            std::initializer_list<int64_t> batches,
                                                            std::initializer_list<std::pair<int64_t, int64_t>> cuts,
                                                            Params params) {
  RowDotParams all = params(int64_t(0), tokens, int64_t(0), rows);
  std::vector<float> y_all(all.y_row_stride * size_t(tokens));
  all.y = y_all.data();
  row_dot_for(isa, all.wtype)(all);
  for (int64_t batch : batches)
    for (int64_t t0 = 0; t0 < tokens; t0 += batch) {
      const int64_t n = std::min(batch, tokens - t0);
      for (auto [r0, r1] : cuts) {
        RowDotParams p = params(t0, n, r0, r1);
        std::vector<float> y(p.y_row_stride * size_t(n), -7.0f);
        p.y = y.data();
        row_dot_for(isa, p.wtype)(p);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = r0; r < r1; ++r)
            if (y[size_t(t) * p.y_row_stride + size_t(r)] != y_all[size_t(t0 + t) * all.y_row_stride + size_t(r)])
              return ::testing::AssertionFailure() << "batch " << batch << ", token " << t0 + t << ", row " << r;
      }
    }
  return ::testing::AssertionSuccess();
}

}  // namespace tandem::kernels::testing
