// The reference matmuls against two independent statements of what they
// compute:
//  1. exact: dequantize_generic() the weights, round the activations to the
//     activation type (quantize_activations + dequantize_generic), and take a
//     double dot product. The kernels differ from this only in summation
//     order and the f32 rounding of per-block products: 1e-5 of sum|w*x|.
//  2. plain f32: the same weights against the unrounded activations. The
//     difference is the activation-conversion error, bounded element-wise
//     (see act_error_bound) and, as a statistic, by kF32RefRms below.
// Plus the API's edges (ranges, strides, accumulate, errors). Hand-built
// blocks worked out from ggml's formulas are in matmul_by_hand_test.cpp.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quantize.h"

namespace tandem::kernels {
namespace {

constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                  DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K,
                                  DType::kQ6_K, DType::kQ8_K};

// A weight matrix stored row by row with `stride` bytes between rows; the
// padding holds junk the kernels must not read.
struct Weights {
  DType type;
  int64_t rows, cols;
  size_t stride;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // rows x cols, dequantized
};

Weights make_weights(DType t, int64_t rows, int64_t cols, size_t pad, std::mt19937& rng) {
  Weights w{t, rows, cols, static_cast<size_t>(*bytes_for(t, cols)) + pad, {}, {}};
  w.bytes.assign(w.stride * static_cast<size_t>(rows), 0xA5);
  w.deq.resize(static_cast<size_t>(rows * cols));
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = nd(rng);
    if (cols > 0) row[static_cast<size_t>(r % cols)] *= 6.0f;  // an outlier per row
    uint8_t* dst = w.bytes.data() + static_cast<size_t>(r) * w.stride;
    quantize_generic(t, row.data(), dst, row.size());
    dequantize_generic(t, dst, w.deq.data() + r * cols, row.size());
  }
  return w;
}

// n_tokens activation rows, `stride` floats apart; padding is NaN so that a
// stray read poisons the result.
std::vector<float> make_activations(int64_t n_tokens, int64_t cols, size_t stride,
                                    std::mt19937& rng) {
  std::vector<float> x(stride * static_cast<size_t>(n_tokens),
                       std::numeric_limits<float>::quiet_NaN());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t i = 0; i < cols; ++i) {
      float v = nd(rng);
      if ((t * cols + i) % 37 == 5) v *= 10.0f;  // outliers, as real activations have
      x[static_cast<size_t>(t) * stride + static_cast<size_t>(i)] = v;
    }
  return x;
}

// x rounded to the activation type of weight type t, as the kernels see it.
std::vector<float> rounded_activations(DType t, const float* x, int64_t cols) {
  const DType at = activation_type(t);
  std::vector<float> out(x, x + cols);
  if (at == DType::kF32) return out;
  std::vector<uint8_t> q(*bytes_for(at, cols));
  quantize_activations(at, x, q.data(), out.size());
  dequantize_generic(at, q.data(), out.data(), out.size());
  return out;
}

// Largest possible |x_i - rounded x_i| for weight type t's activation type:
// half an ulp for fp16/bf16; for Q8_0 half a step of d = amax/127 plus the
// fp16 rounding of d (|q| <= 127 steps of 2^-11 relative); Q8_K keeps d in
// f32 (half a step, plus f32 slack).
std::vector<double> act_error_bound(DType t, const float* x, int64_t cols) {
  std::vector<double> e(static_cast<size_t>(cols), 0.0);
  const DType at = activation_type(t);
  const int block = static_cast<int>(info(at).block_elems);
  for (int64_t b = 0; b < cols; b += block) {
    double amax = 0;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[b + i])));
    for (int i = 0; i < block; ++i) {
      const double ax = std::fabs(static_cast<double>(x[b + i]));
      double& ei = e[static_cast<size_t>(b + i)];
      switch (at) {
        case DType::kF32:
          ei = 0;
          break;
        case DType::kF16:
          ei = ax * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
          break;
        case DType::kBF16:
          ei = ax * std::ldexp(1.0, -8);
          break;
        case DType::kQ8_0:
          ei = amax / 127 * (0.5 + 127 * std::ldexp(1.0, -11)) * 1.001;
          break;
        case DType::kQ8_K:
          ei = amax / 127 * 0.501;
          break;
        default:
          ADD_FAILURE() << "unexpected activation type";
      }
    }
  }
  return e;
}

struct Expected {
  std::vector<double> exact, exact_mag;  // rounded activations: value, sum |w*x|
  std::vector<double> f32, f32_bound;    // unrounded activations: value, error bound
};

// Expected y[t][r] (index t*rows + r) for every token and row.
Expected expected(const Weights& w, const std::vector<float>& x, int64_t n_tokens,
                  size_t x_stride) {
  Expected e;
  const size_t n = static_cast<size_t>(n_tokens * w.rows);
  e.exact.resize(n), e.exact_mag.resize(n), e.f32.resize(n), e.f32_bound.resize(n);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + static_cast<size_t>(t) * x_stride;
    const auto xr = rounded_activations(w.type, xt, w.cols);
    const auto eb = act_error_bound(w.type, xt, w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
      const float* wr = w.deq.data() + r * w.cols;
      double s = 0, mag = 0, sf = 0, bound = 0;
      for (int64_t i = 0; i < w.cols; ++i) {
        const auto ii = static_cast<size_t>(i);
        s += static_cast<double>(wr[i]) * xr[ii];
        mag += std::fabs(static_cast<double>(wr[i]) * xr[ii]);
        sf += static_cast<double>(wr[i]) * xt[i];
        bound += std::fabs(static_cast<double>(wr[i])) * eb[ii];
      }
      const size_t o = static_cast<size_t>(t * w.rows + r);
      e.exact[o] = s, e.exact_mag[o] = mag, e.f32[o] = sf;
      e.f32_bound[o] = bound + 1e-5 * mag;
    }
  }
  return e;
}

// The y tolerance against the exact reference, relative to sum |w*x|.
constexpr double kSumOrderTol = 1e-5;

MatmulParams params(const Weights& w, const std::vector<float>& x, int64_t n_tokens,
                    size_t x_stride, std::vector<float>& y, size_t y_stride,
                    std::vector<uint8_t>& ws) {
  MatmulParams p;
  p.wtype = w.type;
  p.w = w.bytes.data();
  p.rows = w.rows;
  p.cols = w.cols;
  p.w_row_stride = w.stride;
  p.x = x.data();
  p.n_tokens = n_tokens;
  p.x_row_stride = x_stride;
  p.y = y.data();
  p.y_row_stride = y_stride;
  p.workspace = ws.data();
  p.workspace_bytes = ws.size();
  return p;
}

int64_t test_cols(DType t) {
  return info(t).block_elems == 256 ? 512 : 96;
}

// Relative RMS error against the plain f32 reference (unrounded
// activations), sqrt(sum err^2 / sum ref^2) over 21 tokens x 13 rows per
// type with the data above (N(0,1) activations, every 37th value x10).
// Measured (g++ 12, -O2, libstdc++'s normal_distribution, seed 1234):
//   f32 3.2e-8   f16 2.3e-4   bf16 2.0e-3
//   q8_0 1.1e-2   q4_0 1.1e-2   q5_0 9.7e-3          (Q8_0 activations)
//   q4_k 2.3e-2   q5_k 2.3e-2   q6_k 2.2e-2   q8_k 2.3e-2  (Q8_K activations)
// This is the activation-rounding error alone (the weights are the same on
// both sides): what llama.cpp's CPU backend also carries, and what separates
// it and us from an f32 computation with the same quantised weights. Q8_K's
// one scale per 256 values makes an outlier cost more than Q8_0's per 32.
double f32_ref_rms_bound(DType t) {
  switch (activation_type(t)) {
    case DType::kF32:
      return 1e-6;
    case DType::kF16:
      return 5e-4;
    case DType::kBF16:
      return 4e-3;
    case DType::kQ8_0:
      return 2e-2;
    default:
      return 4e-2;
  }
}

TEST(Matmul, ActivationTypes) {
  EXPECT_EQ(activation_type(DType::kF32), DType::kF32);
  EXPECT_EQ(activation_type(DType::kF16), DType::kF16);
  EXPECT_EQ(activation_type(DType::kBF16), DType::kBF16);
  EXPECT_EQ(activation_type(DType::kQ8_0), DType::kQ8_0);
  EXPECT_EQ(activation_type(DType::kQ4_0), DType::kQ8_0);
  EXPECT_EQ(activation_type(DType::kQ5_0), DType::kQ8_0);
  EXPECT_EQ(activation_type(DType::kQ4_K), DType::kQ8_K);
  EXPECT_EQ(activation_type(DType::kQ5_K), DType::kQ8_K);
  EXPECT_EQ(activation_type(DType::kQ6_K), DType::kQ8_K);
  EXPECT_EQ(activation_type(DType::kQ8_K), DType::kQ8_K);
  for (DType t : {DType::kF8E4M3, DType::kI8, DType::kU8, DType::kI32}) {
    try {
      activation_type(t);
      ADD_FAILURE() << name(t) << " has no matmul";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    }
  }
  EXPECT_THROW(activation_type(static_cast<DType>(200)), Error);
}

TEST(Matmul, WorkspaceBytes) {
  EXPECT_EQ(matmul_workspace_bytes(DType::kF32, 4096, 17), 0u);  // x is read in place
  EXPECT_EQ(matmul_workspace_bytes(DType::kF16, 10, 3), 3u * 10 * 2);
  EXPECT_EQ(matmul_workspace_bytes(DType::kBF16, 10, 3), 3u * 10 * 2);
  EXPECT_EQ(matmul_workspace_bytes(DType::kQ4_0, 64, 3), 3u * 2 * 34);
  EXPECT_EQ(matmul_workspace_bytes(DType::kQ5_0, 64, 1), 2u * 34);
  EXPECT_EQ(matmul_workspace_bytes(DType::kQ6_K, 512, 3), 3u * 2 * 292);
  EXPECT_EQ(matmul_workspace_bytes(DType::kQ4_K, 256, 0), 0u);
  EXPECT_EQ(matmul_workspace_bytes(DType::kQ8_0, 0, 5), 0u);
}

// Every weight type, several token counts, both references.
TEST(Matmul, RandomAgainstReferences) {
  std::mt19937 rng(1234);
  for (DType t : kWeightTypes) {
    double err2 = 0, ref2 = 0;  // vs the f32 reference, over all token counts
    for (int64_t n_tokens : {1, 3, 17}) {
      SCOPED_TRACE(testing::Message() << name(t) << " n_tokens=" << n_tokens);
      const int64_t rows = 13, cols = test_cols(t);
      const Weights w = make_weights(t, rows, cols, 0, rng);
      const auto x = make_activations(n_tokens, cols, static_cast<size_t>(cols), rng);
      std::vector<uint8_t> ws(matmul_workspace_bytes(t, cols, n_tokens));
      std::vector<float> y(static_cast<size_t>(n_tokens * rows), -7.0f);
      matmul_generic(params(w, x, n_tokens, static_cast<size_t>(cols), y, rows, ws));

      const Expected e = expected(w, x, n_tokens, static_cast<size_t>(cols));
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], e.exact[i], kSumOrderTol * e.exact_mag[i] + 1e-30) << "output " << i;
        ASSERT_NEAR(y[i], e.f32[i], e.f32_bound[i]) << "output " << i;
        err2 += (y[i] - e.f32[i]) * (y[i] - e.f32[i]);
        ref2 += e.f32[i] * e.f32[i];
      }
    }
    const double rms = std::sqrt(err2 / ref2);
    std::printf("  %-5s relative RMS error vs f32 activations: %.2g\n",
                std::string(name(t)).c_str(), rms);
    EXPECT_LT(rms, f32_ref_rms_bound(t)) << name(t);
  }
}

// f32_activations: any weight type gives bit for bit what an F32 matrix of
// its dequantised values gives (the Hugging Face path), with no workspace.
TEST(Matmul, F32ActivationsEqualDequantisedF32) {
  std::mt19937 rng(77);
  for (DType t : kWeightTypes) {
    SCOPED_TRACE(name(t));
    const int64_t rows = 7, cols = 2 * test_cols(t), n_tokens = 5;
    const Weights w = make_weights(t, rows, cols, 3, rng);
    const auto x = make_activations(n_tokens, cols, static_cast<size_t>(cols) + 1, rng);
    ASSERT_EQ(matmul_workspace_bytes(t, cols, n_tokens, true), 0u);
    std::vector<float> y(static_cast<size_t>(n_tokens * rows)), y32(y.size());
    std::vector<uint8_t> none;
    MatmulParams p = params(w, x, n_tokens, static_cast<size_t>(cols) + 1, y, rows, none);
    p.f32_activations = true;
    matmul_generic(p);

    MatmulParams q = p;
    q.wtype = DType::kF32;
    q.w = w.deq.data();
    q.w_row_stride = static_cast<size_t>(cols) * sizeof(float);
    q.f32_activations = false;
    q.y = y32.data();
    matmul_generic(q);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], y32[i]) << "output " << i;
  }
}

// Sub-ranges computed separately (as threads would) with accumulate, padded
// strides everywhere: W rows padded with junk bytes, x rows with NaN, y rows
// with sentinels that must survive, and rows outside the range untouched.
TEST(Matmul, RowRangesStridesAndAccumulate) {
  std::mt19937 rng(99);
  for (DType t : kWeightTypes) {
    SCOPED_TRACE(name(t));
    const int64_t rows = 11, cols = test_cols(t), n_tokens = 3;
    const size_t x_stride = static_cast<size_t>(cols) + 5, y_stride = rows + 4;
    const Weights w = make_weights(t, rows, cols, 7, rng);
    const auto x = make_activations(n_tokens, cols, x_stride, rng);
    std::vector<uint8_t> ws(matmul_workspace_bytes(t, cols, n_tokens) + 3);
    std::vector<float> y(y_stride * n_tokens);
    for (size_t i = 0; i < y.size(); ++i) y[i] = 100.0f + static_cast<float>(i);
    const std::vector<float> y0 = y;

    MatmulParams p = params(w, x, n_tokens, x_stride, y, y_stride, ws);
    convert_activations(p);
    // Rows [2, 5) then [5, 10): row 0, 1 and 10 are never computed.
    p.accumulate = true;
    p.row_begin = 2, p.row_end = 5;
    matmul_rows_generic(p);
    p.row_begin = 5, p.row_end = 10;
    matmul_rows_generic(p);
    p.row_begin = 7, p.row_end = 7;  // empty: no-op
    matmul_rows_generic(p);

    const Expected e = expected(w, x, n_tokens, x_stride);
    for (int64_t tk = 0; tk < n_tokens; ++tk) {
      for (size_t r = 0; r < y_stride; ++r) {
        const size_t i = static_cast<size_t>(tk) * y_stride + r;
        if (r >= 2 && r < 10) {
          const size_t o = static_cast<size_t>(tk * rows) + r;
          EXPECT_NEAR(y[i], y0[i] + e.exact[o], kSumOrderTol * e.exact_mag[o] + 1e-4)
              << "token " << tk << " row " << r;
        } else {
          EXPECT_EQ(y[i], y0[i]) << "token " << tk << " row " << r << " was written";
        }
      }
    }

    // Overwrite mode on the remaining rows (row_end -1 = all rows from 10).
    p.accumulate = false;
    p.row_begin = 10, p.row_end = -1;
    matmul_rows_generic(p);
    for (int64_t tk = 0; tk < n_tokens; ++tk) {
      const size_t o = static_cast<size_t>(tk * rows + 10);
      EXPECT_NEAR(y[static_cast<size_t>(tk) * y_stride + 10], e.exact[o],
                  kSumOrderTol * e.exact_mag[o] + 1e-30);
      EXPECT_EQ(y[static_cast<size_t>(tk) * y_stride + 0], y0[static_cast<size_t>(tk) * y_stride]);
    }
  }
}

// A single token needs no strides; ragged row counts; zero columns.
TEST(Matmul, SmallShapes) {
  std::mt19937 rng(5);
  for (DType t : {DType::kQ4_0, DType::kQ6_K, DType::kBF16}) {
    SCOPED_TRACE(name(t));
    for (int64_t rows : {1, 2, 5}) {
      const int64_t cols = info(t).block_elems == 1 ? 3 : info(t).block_elems;
      const Weights w = make_weights(t, rows, cols, 0, rng);
      const auto x = make_activations(1, cols, static_cast<size_t>(cols), rng);
      std::vector<uint8_t> ws(matmul_workspace_bytes(t, cols, 1));
      std::vector<float> y(static_cast<size_t>(rows));
      MatmulParams p = params(w, x, 1, 0, y, 0, ws);
      matmul_generic(p);
      const Expected e = expected(w, x, 1, static_cast<size_t>(cols));
      for (size_t r = 0; r < y.size(); ++r)
        EXPECT_NEAR(y[r], e.exact[r], kSumOrderTol * e.exact_mag[r] + 1e-30);
    }
  }
  // Zero columns: every output is an empty sum.
  std::vector<float> y(6, 3.0f);
  std::vector<uint8_t> ws;
  MatmulParams p;
  p.wtype = DType::kQ8_0;
  p.rows = 2, p.cols = 0, p.n_tokens = 3, p.y = y.data(), p.y_row_stride = 2;
  matmul_generic(p);
  EXPECT_EQ(y, std::vector<float>(6, 0.0f));
}

void expect_error(ErrorKind kind, const MatmulParams& p, void (*fn)(const MatmulParams&)) {
  try {
    fn(p);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
  }
}

// Bad sizes throw before anything is read or written.
TEST(Matmul, Errors) {
  std::mt19937 rng(7);
  const Weights w = make_weights(DType::kQ8_0, 4, 64, 0, rng);
  const auto x = make_activations(2, 64, 64, rng);
  std::vector<uint8_t> ws(matmul_workspace_bytes(DType::kQ8_0, 64, 2), 0x5A);
  std::vector<float> y(8, 42.0f);
  const MatmulParams good = params(w, x, 2, 64, y, 4, ws);
  matmul_generic(good);  // the baseline is valid
  std::fill(y.begin(), y.end(), 42.0f);
  std::fill(ws.begin(), ws.end(), uint8_t{0x5A});

  for (auto fn : {&matmul_generic, &convert_activations, &matmul_rows_generic}) {
    MatmulParams p = good;
    p.cols = 48;  // not a whole number of 32-value blocks
    expect_error(ErrorKind::kInvalidInput, p, fn);
    p = good;
    p.workspace_bytes = ws.size() - 1;
    expect_error(ErrorKind::kInternal, p, fn);
    p = good;
    p.workspace = nullptr;
    expect_error(ErrorKind::kInternal, p, fn);
    p = good;
    p.wtype = DType::kF8E4M3;
    expect_error(ErrorKind::kUnsupported, p, fn);
    p = good;
    p.n_tokens = -1;
    expect_error(ErrorKind::kInvalidInput, p, fn);
  }
  for (auto fn : {&matmul_generic, &matmul_rows_generic}) {
    MatmulParams p = good;
    p.row_end = 5;
    expect_error(ErrorKind::kInternal, p, fn);
    p.row_begin = 3, p.row_end = 2;
    expect_error(ErrorKind::kInternal, p, fn);
    p = good;
    p.y_row_stride = 3;
    expect_error(ErrorKind::kInternal, p, fn);
    p = good;
    p.w_row_stride = 33;
    expect_error(ErrorKind::kInternal, p, fn);
    p = good;
    p.y = nullptr;
    expect_error(ErrorKind::kInternal, p, fn);
  }
  for (auto fn : {&matmul_generic, &convert_activations}) {
    MatmulParams p = good;
    p.x_row_stride = 63;
    expect_error(ErrorKind::kInternal, p, fn);
    p = good;
    p.x = nullptr;
    expect_error(ErrorKind::kInternal, p, fn);
  }
  // K-quants: 128 columns is half a super-block.
  EXPECT_THROW(matmul_workspace_bytes(DType::kQ4_K, 128, 1), Error);
  EXPECT_THROW(matmul_workspace_bytes(DType::kQ8_0, 64, -1), Error);
  EXPECT_THROW(matmul_workspace_bytes(DType::kQ8_0, -32, 1), Error);
  EXPECT_THROW(matmul_workspace_bytes(DType::kQ8_0, 32, std::numeric_limits<int64_t>::max()),
               Error);

  EXPECT_EQ(y, std::vector<float>(8, 42.0f)) << "an error path wrote the output";
  EXPECT_EQ(ws, std::vector<uint8_t>(ws.size(), 0x5A)) << "an error path wrote the workspace";
}

}  // namespace
}  // namespace tandem::kernels
