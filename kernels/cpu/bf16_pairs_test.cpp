// The avx2 level's BF16 rowmajor rows (row_dot_x86_bf16_pairs.cpp) against
// a scalar model of their order, bit for bit: every dot of every call, on
// ragged shapes (rows that leave a tile of 4 part-filled, columns that end
// mid-step), from 1 to 9 tokens (every tile shape), over whole and partial
// row ranges, with subnormal, infinite and NaN values. The model does not
// depend on the call, so this is also the test that a token gets the same
// floats in every call. (Agreement with the generic level within bounds:
// row_dot_test.cpp's RowDot.Avx2MatchesGeneric.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/row_dot_test_params.h"

namespace tandem::kernels {
namespace {

constexpr float kUnset = -12345.0f;  // what the output holds where no dot may write

uint16_t bf16_at(const std::vector<uint8_t>& v, size_t byte) {
  uint16_t b;
  std::memcpy(&b, v.data() + byte, 2);
  return b;
}

// One dot as the avx2 kernel sums it: lane k adds, per 16 columns, column
// 2k's product then column 2k + 1's, each with one fma, the columns past
// the end as zeros; the lanes then as vsum's tree, (s0+s4 + s2+s6) + (s1+s5 + s3+s7).
float model_dot(const std::vector<uint8_t>& w, size_t w_off, const std::vector<uint8_t>& a, size_t a_off,
                int64_t cols) {
  float s[8] = {};
  for (int64_t c0 = 0; c0 < cols; c0 += 16)
    for (int k = 0; k < 8; ++k)
      for (int h = 0; h < 2; ++h) {
        const int64_t c = c0 + 2 * k + h;
        const float wv = c < cols ? bf16_to_f32(bf16_at(w, w_off + size_t(2 * c))) : 0.0f;
        const float xv = c < cols ? bf16_to_f32(bf16_at(a, a_off + size_t(2 * c))) : 0.0f;
        s[k] = std::fma(wv, xv, s[k]);
      }
  float t[4];
  for (int k = 0; k < 4; ++k) t[k] = s[k] + s[k + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

struct Case {
  int64_t rows, cols, tokens;
  size_t w_stride, a_stride;
  std::vector<uint8_t> w, a;
};

// Random bf16 weights and activations, 6 bytes of junk after each row (so
// rows start unaligned); `special` puts subnormals, infinities and a NaN in.
Case make_case(int64_t rows, int64_t cols, int64_t tokens, std::mt19937& rng, bool special) {
  Case c{rows, cols, tokens, size_t(2 * cols) + 6, size_t(2 * cols) + 6, {}, {}};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](std::vector<uint8_t>& v, size_t stride, int64_t n_rows, float scale) {
    v.assign(stride * size_t(n_rows), 0x7F);
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const uint16_t b = f32_to_bf16(nd(rng) * scale);
        std::memcpy(v.data() + size_t(r) * stride + size_t(2 * k), &b, 2);
      }
  };
  fill(c.w, c.w_stride, rows, 0.05f);
  fill(c.a, c.a_stride, tokens, 1.0f);
  if (special) {
    auto put = [](std::vector<uint8_t>& v, size_t byte, uint16_t b) { std::memcpy(v.data() + byte, &b, 2); };
    for (int64_t r = 0; r < rows; ++r) put(c.w, size_t(r) * c.w_stride, uint16_t(0x0003 + r));  // subnormals
    put(c.w, c.w_stride * size_t(rows / 2) + size_t(2 * (cols - 1)), 0x7F80);                  // +inf
    put(c.a, size_t(2 * (cols / 2)), 0xFF80);                                                  // -inf, token 0
    if (tokens > 1) put(c.a, c.a_stride + size_t(2 * (cols - 1)), 0x7FC1);                     // NaN, token 1
  }
  return c;
}

// How a call names its tokens and what follows it.
struct CallShape {
  std::vector<int64_t> tokens;           // c's tokens, in the call's order
  int64_t r0 = 0, r1 = 0;                // its rows
  bool gathered = false;                 // through a_rows rather than a and a_row_bytes
  const uint8_t* then_rows = nullptr;    // the caller's next rows (a prefetch hint)
};

std::vector<int64_t> run_of(int64_t t0, int64_t n) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(t0 + i);
  return t;
}

// One call through the avx2 BF16 kernel, each output (its row stride one
// more than rows) against the model.
void check_call(const Case& c, const CallShape& s) {
  const int64_t n = int64_t(s.tokens.size());
  SCOPED_TRACE("rows " + std::to_string(c.rows) + " [" + std::to_string(s.r0) + ", " + std::to_string(s.r1) +
               ") cols " + std::to_string(c.cols) + " tokens from " + std::to_string(s.tokens[0]) + ", " +
               std::to_string(n) + (s.gathered ? " gathered" : "") + (s.then_rows ? " then_rows" : ""));
  RowDotParams p = testing::rowmajor_params(DType::kBF16, c.w.data(), c.w_stride, c.rows, c.cols,
                                            c.a.data() + size_t(s.tokens[0]) * c.a_stride, c.a_stride, n, s.r0,
                                            s.r1);
  std::vector<const uint8_t*> rows;
  for (int64_t t : s.tokens) rows.push_back(c.a.data() + size_t(t) * c.a_stride);
  if (s.gathered) p.a_rows = rows.data();
  p.then_rows = s.then_rows;
  std::vector<float> y(p.y_row_stride * size_t(n), kUnset);
  p.y = y.data();
  row_dot_for(CpuIsa::kAvx2, DType::kBF16)(p);
  int wrong = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r <= c.rows; ++r) {
      const float got = y[size_t(t) * p.y_row_stride + size_t(r)];
      const float want = r >= s.r0 && r < s.r1 ? model_dot(c.w, size_t(r) * c.w_stride, c.a,
                                                           size_t(s.tokens[size_t(t)]) * c.a_stride, c.cols)
                                               : kUnset;
      if (!same_float(got, want) && ++wrong <= 3)
        ADD_FAILURE() << "token " << s.tokens[size_t(t)] << " row " << r << ": " << got << ", the model " << want;
    }
}

bool have_avx2() { return supports(detect_cpu_features(), CpuIsa::kAvx2); }

TEST(Bf16Pairs, EveryDotSumsInTheModelsOrder) {
  if (!have_avx2()) GTEST_SKIP() << "this cpu cannot run avx2";
  std::mt19937 rng(461);
  for (int64_t rows : {1, 3, 4, 5, 8, 9, 13})
    for (int64_t cols : {1, 7, 15, 16, 17, 33, 100, 1029})
      for (int64_t tokens : {1, 2, 3, 4, 5, 6, 8, 9}) {
        const Case c = make_case(rows, cols, tokens, rng, false);
        check_call(c, {run_of(0, tokens), 0, rows});
      }
}

// Each token alone, and the others in calls of other sizes over other
// rows, gathered in another order, or with the caller's next rows named
// (the last tile's prefetch: into rows below, or the rows right after
// these), give the floats of the whole call (the model's).
TEST(Bf16Pairs, TokensGetTheSameFloatsInAnyCall) {
  if (!have_avx2()) GTEST_SKIP() << "this cpu cannot run avx2";
  std::mt19937 rng(462);
  for (int64_t cols : {100, 1029, 2048}) {
    const Case c = make_case(21, cols, 9, rng, false);
    check_call(c, {run_of(0, 9), 0, 21});
    for (int64_t t = 0; t < 9; ++t) check_call(c, {{t}, 3, 19});
    check_call(c, {run_of(1, 7), 2, 21});
    check_call(c, {run_of(2, 2), 0, 9});
    check_call(c, {{8, 3, 0, 5, 7, 1}, 1, 21, true});
    check_call(c, {run_of(0, 8), 0, 20, false, c.w.data()});
    check_call(c, {run_of(1, 6), 0, 16, true, c.w.data() + 16 * c.w_stride});
  }
}

TEST(Bf16Pairs, SubnormalsInfinitiesAndNaNAsTheModel) {
  if (!have_avx2()) GTEST_SKIP() << "this cpu cannot run avx2";
  std::mt19937 rng(463);
  for (int64_t cols : {7, 33, 1029}) {
    const Case c = make_case(9, cols, 5, rng, true);
    check_call(c, {run_of(0, 5), 0, 9});
    check_call(c, {{1}, 0, 9});
  }
  // A row of nothing but subnormals against ones gives their exact sum
  // (a widening that flushed them would give 0).
  Case c = make_case(4, 64, 1, rng, false);
  for (int64_t k = 0; k < 64; ++k) {
    const uint16_t w = 0x0001, one = 0x3F80;
    for (int64_t r = 0; r < 4; ++r) std::memcpy(c.w.data() + size_t(r) * c.w_stride + size_t(2 * k), &w, 2);
    std::memcpy(c.a.data() + size_t(2 * k), &one, 2);
  }
  RowDotParams p = testing::rowmajor_params(DType::kBF16, c.w.data(), c.w_stride, 4, 64, c.a.data(), c.a_stride,
                                            1, 0, 4);
  std::vector<float> y(p.y_row_stride, kUnset);
  p.y = y.data();
  row_dot_for(CpuIsa::kAvx2, DType::kBF16)(p);
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(y[size_t(r)], 64.0f * bf16_to_f32(0x0001)) << "row " << r;
}

}  // namespace
}  // namespace tandem::kernels
