// bf16_x16z (bf16_x16z.h): BF16 as bf16_x16 with each high byte coded in 4
// bits. Coding gives every value back bit for bit (zeros, subnormals,
// infinities, NaN and values far outside the window as exceptions) or
// refuses a unit it cannot hold; the check (layout_holds), repack_rows
// and the loader's try_repack_rows agree with it; and its kernel (avx512bf16:
// row_dot_x86_x16z.cpp; lower levels: the reference) gives one token
// ggml's floats bit for bit and several tokens bf16_x16's bound, with
// exceptions in the vectors it reads.
#include "kernels/cpu/bf16_x16z.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/row_dot_test_params.h"
#include "kernels/cpu/weight_layout.h"

namespace tandem::kernels {
namespace {

using testing::Activations;
using testing::agrees_within;
using testing::random_activations;
using testing::reversed_rows;
using testing::rowmajor_params;

uint16_t bf16_bits(float v) { return f32_to_bf16(v); }

// Gaussian BF16 weights (trained weights' shape), with a few values the
// window cannot reach: zeros and tiny ones in some rows, and in one unit of
// row group 1 several in one vector pair.
std::vector<uint16_t> gaussian_rows(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<uint16_t> w(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[size_t(r * cols + c)] = bf16_bits(nd(rng) * float(1 + r % 3));
  for (int64_t r = 0; r < rows; r += 3) {
    w[size_t(r * cols + (r * 37) % cols)] = 0;
    w[size_t(r * cols + (r * 53 + 7) % cols)] = bf16_bits(-3e-9f);
  }
  if (rows >= 32)
    for (int64_t r = 16; r < 24; ++r) w[size_t(r * cols + 2 * (r % 3))] = bf16_bits(1e-20f * float(r));
  // Row group 2's first unit: more than its header holds, the rest in its spare.
  if (rows >= 64)
    for (int64_t r = 32; r < 48; ++r) {
      w[size_t(r * cols + (r * 7) % 128)] = bf16_bits(-1e-25f * float(r));
      w[size_t(r * cols + 64 + (r * 11) % 64)] = 0;
    }
  return w;
}

std::vector<uint8_t> bytes_of(const std::vector<uint16_t>& w) {
  std::vector<uint8_t> b(2 * w.size());
  std::memcpy(b.data(), w.data(), b.size());
  return b;
}

// One unit's bf16_x16 bytes from 2048 values in the unit's order.
std::vector<uint8_t> unit_of(const std::vector<uint16_t>& v) { return bytes_of(v); }

TEST(Bf16X16Z, CodesEveryValueBackBitForBit) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::uniform_int_distribution<int> pos(0, 2047);
  std::vector<uint8_t> core(kBf16X16ZCore), spare(kBf16X16ZSpare), back(kBf16X16ZUnit);
  for (int kind = 0; kind < 6; ++kind) {
    SCOPED_TRACE("kind " + std::to_string(kind));
    std::vector<uint16_t> v(2048);
    for (auto& x : v) x = kind == 1 ? 0 : bf16_bits(nd(rng));
    if (kind == 4)  // values of two binades: no exception but the ones put in below
      for (auto& x : v) x = bf16_bits(0.3f + 0.6f * float(pos(rng)) / 2048.0f);
    if (kind == 2)  // specials: each an exception or in the window, as they fall
      for (uint16_t s : {0x0000, 0x8000, 0x0001, 0x8040, 0x7f80, 0xff80, 0x7fc1, 0xffff, 0x3f80})
        v[size_t(pos(rng))] = s;
    if (kind == 3)  // every value of vector pair 5 far below the window
      for (int w = 0; w < 64; ++w) v[size_t(320 + w)] = bf16_bits(1e-30f);
    if (kind == 4)  // exactly as many exceptions as a unit holds
      for (int k = 0; k < kBf16X16ZMaxExceptions; ++k) v[size_t(6 * k)] = bf16_bits(1e-30f * float(k + 1));
    if (kind == 5)  // values over all exponents: a window of 8 holds the most, the rest are exceptions
      for (int k = 0; k < 200; ++k) v[size_t(10 * k)] = uint16_t((k % 128) << 8 | 0x55);
    const std::vector<uint8_t> x16 = unit_of(v);
    ASSERT_TRUE(bf16_x16z_code(x16.data(), core.data(), spare.data()));
    bf16_x16z_decode(core.data(), spare.data(), back.data());
    EXPECT_EQ(back, x16);
    // The header: its mask marks exactly the vectors with exceptions.
    uint64_t mask;
    std::memcpy(&mask, core.data(), 8);
    const int n = bf16_x16z_count(core.data());
    uint64_t want = 0;
    for (int k = 0; k < n; ++k) {
      const uint8_t* x = bf16_x16z_exception(core.data(), spare.data(), k);
      want |= uint64_t(1) << ((x[0] | x[1] << 8) / 32);
    }
    EXPECT_EQ(mask, want);
    // The first 17 in the header, the rest in the spare, whose bytes after
    // them are zeros (and so is all of it when the header holds them all).
    const size_t in_spare = 3 * size_t(std::max(0, n - kBf16X16ZInline));
    EXPECT_TRUE(std::all_of(spare.begin() + std::ptrdiff_t(in_spare), spare.end(), [](uint8_t b) { return b == 0; }));
    if (n > kBf16X16ZInline) {
      EXPECT_NE(std::count(spare.begin(), spare.begin() + std::ptrdiff_t(in_spare), 0), std::ptrdiff_t(in_spare));
    }
    EXPECT_EQ(core[12 + 3 * std::min(n, kBf16X16ZInline)], 0);
    if (kind == 0 || kind == 1) {
      EXPECT_LE(n, 2);
    }
    if (kind >= 3) {  // some in the spare
      EXPECT_GT(n, kBf16X16ZInline);
    }
    if (kind == 3) {
      EXPECT_EQ(mask & (uint64_t(3) << 10), uint64_t(3) << 10);
    }
    if (kind == 4) {
      EXPECT_EQ(n, kBf16X16ZMaxExceptions);
    }
  }
  // One exception more than the unit holds: refused.
  std::vector<uint16_t> v(2048);
  for (auto& x : v) x = bf16_bits(0.3f + 0.6f * float(pos(rng)) / 2048.0f);
  for (int k = 0; k <= kBf16X16ZMaxExceptions; ++k) v[size_t(6 * k)] = bf16_bits(1e-30f * float(k + 1));
  EXPECT_FALSE(bf16_x16z_code(unit_of(v).data(), core.data(), spare.data()));
}

TEST(Bf16X16Z, LoaderCheckAndRepackAgree) {
  std::mt19937 rng(5);
  const int64_t rows = 32, cols = 256;
  std::vector<uint8_t> w = bytes_of(gaussian_rows(rows, cols, rng));
  EXPECT_TRUE(layout_holds(WeightLayout::kBf16X16Z, DType::kBF16, w.data(), rows, cols));
  std::vector<uint8_t> z = w;
  repack_rows(WeightLayout::kBf16X16Z, DType::kBF16, z.data(), rows, cols);
  EXPECT_NE(z, w);
  std::vector<uint8_t> t = w;  // the loader's one pass codes the same bytes
  EXPECT_TRUE(try_repack_rows(WeightLayout::kBf16X16Z, DType::kBF16, t.data(), rows, cols));
  EXPECT_EQ(t, z);
  // Random bits lie over every exponent: refused, and left as they were.
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> noise(w.size());
  for (auto& b : noise) b = uint8_t(byte(rng));
  EXPECT_FALSE(layout_holds(WeightLayout::kBf16X16Z, DType::kBF16, noise.data(), rows, cols));
  std::vector<uint8_t> tried = noise;
  try {
    repack_rows(WeightLayout::kBf16X16Z, DType::kBF16, tried.data(), rows, cols);
    ADD_FAILURE() << "random bits were coded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("bf16_x16z"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tried, noise);
  EXPECT_FALSE(try_repack_rows(WeightLayout::kBf16X16Z, DType::kBF16, tried.data(), rows, cols));
  EXPECT_EQ(tried, noise);
  // A first group that codes and a second that does not: the rows come back
  // as they were, though the first group had been written.
  std::vector<uint8_t> mixed = w;
  std::copy(noise.begin() + noise.size() / 2, noise.end(), mixed.begin() + mixed.size() / 2);
  std::vector<uint8_t> tried_mixed = mixed;
  EXPECT_FALSE(try_repack_rows(WeightLayout::kBf16X16Z, DType::kBF16, tried_mixed.data(), rows, cols));
  EXPECT_EQ(tried_mixed, mixed);
  // Layouts that code nothing hold anything.
  EXPECT_TRUE(layout_holds(WeightLayout::kBf16X16, DType::kBF16, noise.data(), rows, cols));
  EXPECT_TRUE(layout_fits(WeightLayout::kBf16X16Z, DType::kBF16, 16, 128));
  EXPECT_FALSE(layout_fits(WeightLayout::kBf16X16Z, DType::kBF16, 16, 192));  // whole units of 128 columns
  EXPECT_FALSE(layout_fits(WeightLayout::kBf16X16Z, DType::kBF16, 24, 128));
  EXPECT_FALSE(layout_fits(WeightLayout::kBf16X16Z, DType::kF16, 16, 128));
}

// At every level against the generic level over rowmajor rows: one token
// bit for bit (ggml's vec_dot order, as bf16_x16), several tokens bit for
// bit below avx512bf16 (the reference reads the layout) and within
// (cols / 2 + 2) * 2^-24 * sum|w*x| at avx512bf16 (each row's pairs in
// order, in one or two chains). 1152 columns: a step of 8 units and one of
// 1 for passes of more than 8 tokens.
TEST(Bf16X16Z, RowDotsAgreeWithRowmajorAtEveryLevel) {
  std::mt19937 rng(29);
  const DType type = DType::kBF16;
  double worst = 0;
  for (int64_t cols : {128, 384, 1152, 2048}) {
    for (int64_t rows : {16, 64, 80, 96, 176}) {
      const std::vector<uint16_t> wv = gaussian_rows(rows, cols, rng);
      const std::vector<uint8_t> w = bytes_of(wv);
      std::vector<uint8_t> z = w;
      repack_rows(WeightLayout::kBf16X16Z, type, z.data(), rows, cols);
      if (rows >= 64) {  // the kernels read that unit's spare
        const uint8_t* core = z.data() + bf16_x16z_core_at(cols / kBf16X16ZCols, 2, 0);
        EXPECT_GT(bf16_x16z_count(core), kBf16X16ZInline);
      }
      const size_t row_bytes = 2 * size_t(cols);
      for (int64_t tokens : {1, 2, 3, 4, 5, 8, 9, 12, 17}) {
        const Activations a = random_activations(type, tokens, cols, rng);
        const std::vector<const uint8_t*> gathered = reversed_rows(a.bytes, a.ab, tokens);
        // rows > 16: skip the first and last group (2 to 9 groups: tiles of
        // three from the thirds, then two or one)
        const int64_t r0 = rows > 16 ? 16 : 0, r1 = rows > 16 ? rows - 16 : rows;
        RowDotParams p = rowmajor_params(type, w.data(), row_bytes, rows, cols, a.row(0), a.ab, tokens, r0, r1);
        std::vector<float> ref(p.y_row_stride * size_t(tokens), -7.0f);
        p.y = ref.data();
        generic::find(type)(p);
        auto abs_dot = [&](int64_t t, int64_t r) {
          double s = 0;
          for (int64_t c = 0; c < cols; ++c)
            s += std::fabs(double(bf16_to_f32(wv[size_t(r * cols + c)])) *
                           double(bf16_to_f32(load_unaligned<uint16_t>(a.row(t) + 2 * c))));
          return s;
        };
        for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
          if (!supports(detect_cpu_features(), isa)) continue;
          for (bool gather : {false, true}) {
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                         ", " + std::to_string(tokens) + " tokens" + (gather ? ", gathered" : ""));
            RowDotParams q = p;
            q.w = z.data();
            q.layout = WeightLayout::kBf16X16Z;
            q.a_rows = gather ? gathered.data() : nullptr;
            std::vector<float> y(ref.size(), -7.0f);
            q.y = y.data();
            row_dot_check(q);
            const bool exact = tokens == 1 || isa < CpuIsa::kAvx512Bf16;
            const double bound = exact ? 0.0 : double(cols / 2 + 2) * 0x1p-24;
            // Either prefetch profile: the same floats (its requests only move bytes).
            for (CpuPrefetch pf : {CpuPrefetch::kSoftware, CpuPrefetch::kHardware}) {
              SCOPED_TRACE(std::string(prefetch_name(pf)) + " prefetch");
              std::fill(y.begin(), y.end(), -7.0f);
              q.prefetch = pf;
              row_dot_for(isa, type)(q);
              double w_here = 0;
              ASSERT_TRUE(agrees_within(q, y, ref, gather, bound, abs_dot, w_here));
              if (!exact) worst = std::max(worst, w_here);
            }
          }
        }
      }
    }
  }
  std::printf("  bf16_x16z, several tokens: worst |avx512bf16 - generic| / sum|w*x| = %.2e\n", worst);
}

}  // namespace
}  // namespace tandem::kernels
