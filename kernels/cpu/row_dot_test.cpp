// Every vector row-dot variant against the generic one (row_dot.h), per
// weight type, on random shapes with ragged rows, columns, tokens and row
// ranges. The bound on |vector - generic| is a fraction of sum|w*x| (with
// the dequantised weights and activations): the variants add the same
// products, or the same exact integer block sums, in another order.
#include "kernels/cpu/row_dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quantize.h"

namespace tandem::kernels {
namespace {

struct TypeCase {
  DType type;
  std::vector<int64_t> cols;  // column counts to try (ragged where the type allows)
  double rel_bound;           // of sum|w*x|
};

const TypeCase kCases[] = {
    {DType::kF32, {1, 7, 16, 33, 100, 1029}, 2e-6},
    {DType::kBF16, {1, 7, 32, 33, 100, 1029}, 2e-6},
    {DType::kF8E4M3, {5, 128, 200, 448, 1024}, 2e-6},
    {DType::kQ8_0, {32, 96, 224, 1024}, 2e-6},
    {DType::kQ4_K, {256, 768, 2048}, 2e-6},
    {DType::kQ5_K, {256, 768, 2048}, 2e-6},
    {DType::kQ6_K, {256, 768, 2048}, 2e-6},
};

struct Problem {
  DType type;
  int64_t rows, cols, tokens;
  size_t w_stride, a_stride, scale_stride;
  std::vector<uint8_t> w, a;
  std::vector<float> scales, w_deq, a_deq;
};

Problem make_problem(DType t, int64_t rows, int64_t cols, int64_t tokens, std::mt19937& rng) {
  Problem p{t, rows, cols, tokens, 0, 0, 0, {}, {}, {}, {}, {}};
  p.w_stride = size_t(*bytes_for(t, uint64_t(cols))) + 13;  // junk between rows
  p.a_stride = row_dot_activation_bytes(t, cols);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  p.w.assign(p.w_stride * size_t(rows), 0xA5);
  p.w_deq.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = nd(rng) * (t == DType::kF8E4M3 ? 60.0f : 0.05f);
    row[size_t(r % cols)] *= 5;
    if (t == DType::kF8E4M3 && cols > 3) row[1] = 0.004f, row[2] = -0.0011f;  // subnormals
    uint8_t* dst = p.w.data() + size_t(r) * p.w_stride;
    quantize_generic(t, row.data(), dst, row.size());
    dequantize_generic(t, dst, p.w_deq.data() + r * cols, row.size());
  }
  if (t == DType::kF8E4M3) {
    p.scale_stride = size_t((cols + 127) / 128) + 1;
    p.scales.resize(p.scale_stride * size_t((rows + 127) / 128));
    std::uniform_real_distribution<float> sd(1e-4f, 3e-3f);
    for (auto& s : p.scales) s = sd(rng);
  }
  std::vector<float> x(size_t(tokens * cols));
  for (auto& v : x) v = nd(rng);
  p.a.assign(p.a_stride * size_t(tokens), 0);
  convert_row_dot_activations(t, x.data(), size_t(cols), tokens, cols, p.a.data(), p.a_stride);
  p.a_deq.resize(x.size());
  const DType act = row_dot_activation_type(t);
  for (int64_t j = 0; j < tokens; ++j)
    dequantize_generic(act, p.a.data() + size_t(j) * p.a_stride, p.a_deq.data() + j * cols,
                       size_t(cols));
  return p;
}

RowDotParams params(const Problem& p, std::vector<float>& y, int64_t r0, int64_t r1) {
  RowDotParams rp;
  rp.wtype = p.type;
  rp.w = p.w.data();
  rp.w_row_stride = p.w_stride;
  rp.rows = p.rows;
  rp.cols = p.cols;
  rp.scales = p.scales.empty() ? nullptr : p.scales.data();
  rp.scale_row_stride = p.scale_stride;
  rp.a = p.a.data();
  rp.a_row_bytes = p.a_stride;
  rp.n_tokens = p.tokens;
  y.assign(size_t(p.tokens * (p.rows + 2)), -7.0f);
  rp.y = y.data();
  rp.y_row_stride = size_t(p.rows + 2);
  rp.row_begin = r0;
  rp.row_end = r1;
  return rp;
}

std::vector<uint8_t> fp8_marks(const Problem& p) {
  std::vector<uint8_t> m(fp8_marks_row_bytes(p.cols) * size_t(p.rows));
  fp8_mark_blocks(p.w.data(), p.w_stride, p.rows, p.cols, m.data());
  return m;
}

double abs_dot(const Problem& p, int64_t r, int64_t t) {
  double s = 0;
  for (int64_t c = 0; c < p.cols; ++c) {
    double w = p.w_deq[size_t(r * p.cols + c)];
    if (p.type == DType::kF8E4M3) w *= p.scales[size_t(r / 128) * p.scale_stride + size_t(c / 128)];
    s += std::fabs(w * p.a_deq[size_t(t * p.cols + c)]);
  }
  return s;
}

// y (from pf) against y_ref: rows outside [row_begin, row_end) untouched,
// the others finite and within rel_bound * sum|w*x| of y_ref; worst: the
// largest |y - y_ref| / sum|w*x| seen.
::testing::AssertionResult agrees(const Problem& p, const RowDotParams& pf, const std::vector<float>& y,
                                  const std::vector<float>& y_ref, double rel_bound, double& worst) {
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t r = 0; r < p.rows + 2; ++r) {
      const size_t i = size_t(t) * pf.y_row_stride + size_t(r);
      if (r < pf.row_begin || r >= pf.row_end) {
        if (y[i] != -7.0f) return ::testing::AssertionFailure() << "wrote outside its rows: row " << r;
        continue;
      }
      const double s = abs_dot(p, r, t), d = std::fabs(double(y[i]) - y_ref[i]);
      if (!std::isfinite(y[i]) || d > rel_bound * s + 1e-30)
        return ::testing::AssertionFailure() << "row " << r << " token " << t << ": " << y[i] << " vs " << y_ref[i]
                                             << " (bound " << rel_bound * s << ")";
      if (s > 0) worst = std::max(worst, d / s);
    }
  return ::testing::AssertionSuccess();
}

void check_level(CpuIsa isa, RowDotFn (*find)(DType)) {
  if (!supports(detect_cpu_features(), isa))
    GTEST_SKIP() << "this cpu cannot run " << isa_name(isa) << " (" << describe(detect_cpu_features())
                 << ")";
  std::mt19937 rng(1234);
  for (const TypeCase& tc : kCases) {
    SCOPED_TRACE(std::string(name(tc.type)));
    RowDotFn fast = find(tc.type);
    ASSERT_NE(fast, nullptr) << isa_name(isa) << " has no " << name(tc.type) << " kernel";
    RowDotFn ref = generic::find(tc.type);
    double worst = 0;
    for (int64_t cols : tc.cols) {
      for (int64_t rows : {1, 6, 133}) {
        for (int64_t tokens : {1, 2, 3, 4, 7}) {
          const Problem p = make_problem(tc.type, rows, cols, tokens, rng);
          const int64_t r0 = rows > 4 ? 1 : 0, r1 = rows > 4 ? rows - 1 : rows;
          std::vector<float> y_fast, y_ref;
          const RowDotParams pf = params(p, y_fast, r0, r1), pr = params(p, y_ref, r0, r1);
          row_dot_check(pf);
          fast(pf);
          ref(pr);
          ASSERT_TRUE(agrees(p, pf, y_fast, y_ref, tc.rel_bound, worst))
              << rows << "x" << cols << ", " << tokens << " tokens";
        }
      }
    }
    std::printf("  %s %s: worst |fast - generic| / sum|w*x| = %.2e\n",
                std::string(isa_name(isa)).c_str(), std::string(name(tc.type)).c_str(), worst);
  }
}

TEST(RowDot, Avx2MatchesGeneric) { check_level(CpuIsa::kAvx2, avx2::find); }
TEST(RowDot, Avx512MatchesGeneric) { check_level(CpuIsa::kAvx512, avx512::find); }
TEST(RowDot, Avx512Bf16MatchesGeneric) { check_level(CpuIsa::kAvx512Bf16, avx512bf16::find); }
// amx has only BF16 of its own (bf16_x16 prefill; weight_layout_test): the
// table row_dot_for gives it, rowmajor BF16 included.
TEST(RowDot, AmxMatchesGeneric) {
  check_level(CpuIsa::kAmx, [](DType t) { return row_dot_for(CpuIsa::kAmx, t); });
}

// FP8 with 2 or more tokens: the amx level's tiles from 3 (2: the bit-map
// loop of avx512bf16, whose floats are its tiles'; rows in 16s from a
// multiple of 16, whole 128-column scale blocks; anything else goes to
// avx512bf16's kernel) against the generic level, within
// (128 + 2) * 2^-24 * sum|w*x|: each scale block's dot rounds after every
// product (tdpbf16ps) before it is scaled. Every level is held to it.
TEST(RowDot, Fp8PrefillAgreesWithGenericAtEveryLevel) {
  std::mt19937 rng(77);
  double worst = 0;
  for (int64_t cols : {128, 640, 1024}) {
    for (int64_t rows : {16, 150, 300}) {
      for (int64_t tokens : {2, 3, 9, 16, 17, 35}) {
        const Problem p = make_problem(DType::kF8E4M3, rows, cols, tokens, rng);
        // whole tiles; a tile and 6 ragged rows; a start off the tiles
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {16, rows - 6}, {5, rows}}) {
          if (r1 <= r0) continue;
          std::vector<float> y_ref;
          const RowDotParams pr = params(p, y_ref, r0, r1);
          generic::find(DType::kF8E4M3)(pr);
          for (int level = 1; level < kCpuIsaCount; ++level) {
            const CpuIsa isa = CpuIsa(level);
            if (!supports(detect_cpu_features(), isa)) continue;
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(rows) + "x" + std::to_string(cols) + ", " +
                         std::to_string(tokens) + " tokens, rows [" + std::to_string(r0) + ", " +
                         std::to_string(r1) + ")");
            std::vector<float> y;
            const RowDotParams pf = params(p, y, r0, r1);
            row_dot_check(pf);
            row_dot_for(isa, DType::kF8E4M3)(pf);
            ASSERT_TRUE(agrees(p, pf, y, y_ref, 130 * 0x1p-24, worst));
          }
        }
      }
    }
  }
  std::printf("  f8_e4m3, 2 to 35 tokens: worst |fast - generic| / sum|w*x| = %.2e\n", worst);
}

// A Q4_K dot written out from the blocks' fields: per `n_sub` sub-blocks (32
// values each) one exact sum of sc_j * isum_j and one of m_j * bsum_j, each
// added to its own f32 sum with one fma; the two subtracted at the end.
float q4_k_by_hand(const Problem& p, int64_t r, int64_t t, int n_sub) {
  const uint8_t* w = p.w.data() + size_t(r) * p.w_stride;
  const uint8_t* a = p.a.data() + size_t(t) * p.a_stride;
  float acc = 0, acc_min = 0;
  for (int64_t b = 0; b < p.cols / 256; ++b) {
    const uint8_t* wb = w + size_t(b) * sizeof(BlockQ4_K);
    const uint8_t* ab = a + size_t(b) * sizeof(BlockQ8_K);
    float dx;
    std::memcpy(&dx, ab, 4);
    uint16_t dh, mh;
    std::memcpy(&dh, wb, 2);
    std::memcpy(&mh, wb + 2, 2);
    const auto* xq = reinterpret_cast<const int8_t*>(ab + offsetof(BlockQ8_K, qs));
    for (int j0 = 0; j0 < 8; j0 += n_sub) {
      int32_t isum = 0, imin = 0;
      for (int j = j0; j < j0 + n_sub; ++j) {
        uint8_t sc, m;
        k4_scale_min(j, wb + offsetof(BlockQ4_K, scales), &sc, &m);
        for (int l = 0; l < 32; ++l) {
          isum += sc * ((wb[offsetof(BlockQ4_K, qs) + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) * xq[32 * j + l];
          imin += m * xq[32 * j + l];
        }
      }
      acc = std::fma(float(isum), fp16_to_f32(dh) * dx, acc);
      acc_min = std::fma(float(imin), fp16_to_f32(mh) * dx, acc_min);
    }
  }
  return acc - acc_min;
}

// llama.cpp's repacked Q4_K GEMM order (gemm_order): every level gives
// the generic result bit for bit (the same exact integer chunk sums and the
// same scalar fma chain), and the generic one is the chunked sum written out
// here from the dequantised blocks: per 64 values, sum_j sc_j * isum_j and
// sum_j m_j * bsum_j, each added to its own f32 sum with one fma.
TEST(RowDot, Q4KGemmOrderIsTheSameAtEveryLevelAndChunkedByHand) {
  std::mt19937 rng(77);
  for (int64_t cols : {256, 768}) {
    const Problem p = make_problem(DType::kQ4_K, 13, cols, 7, rng);  // tiles of 4 and 3 tokens
    std::vector<float> y_ref;
    RowDotParams pr = params(p, y_ref, 0, p.rows);
    pr.gemm_order = true;
    generic::find(DType::kQ4_K)(pr);
    // By hand, from the blocks' fields: one sum per 64-value chunk.
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t t = 0; t < p.tokens; ++t)
        ASSERT_EQ(y_ref[size_t(t) * pr.y_row_stride + size_t(r)], q4_k_by_hand(p, r, t, 2)) << "row " << r << " token " << t;
    for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
      if (!supports(detect_cpu_features(), isa)) continue;
      SCOPED_TRACE(std::string(isa_name(isa)));
      std::vector<float> y;
      RowDotParams pf = params(p, y, 0, p.rows);
      pf.gemm_order = true;
      row_dot_for(isa, DType::kQ4_K)(pf);
      ASSERT_EQ(y, y_ref);
      // And the order matters: without it some result differs in its last bits.
      std::vector<float> y_plain;
      RowDotParams pp = params(p, y_plain, 0, p.rows);
      generic::find(DType::kQ4_K)(pp);
      EXPECT_NE(y_plain, y_ref);
    }
  }
}

// The k-quants' default orders are llama.cpp's x86 ones (Q4_K: its
// repacked GEMV, one exact sum per super-block for the scales and one for
// the mins, each added with an fma; Q5_K and Q6_K: ggml_vec_dot's 8 lanes):
// every level gives the generic result bit for bit, on tiles of 4 and 1 rows
// by 1 to 4 tokens, asking for the rows ahead or not (CpuPrefetch); and the
// generic Q4_K is the GEMV written out here.
TEST(RowDot, KQuantsSumInLlamaCppsX86OrderAtEveryLevel) {
  std::mt19937 rng(78);
  for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
    for (int64_t tokens : {1, 2, 7}) {
      SCOPED_TRACE(std::string(name(type)) + ", " + std::to_string(tokens) + " tokens");
      const Problem p = make_problem(type, 13, 768, tokens, rng);
      std::vector<float> y_ref;
      const RowDotParams pr = params(p, y_ref, 0, p.rows);
      generic::find(type)(pr);
      if (type == DType::kQ4_K) {  // one sum per super-block
        for (int64_t r = 0; r < p.rows; ++r)
          for (int64_t t = 0; t < p.tokens; ++t)
            ASSERT_EQ(y_ref[size_t(t) * pr.y_row_stride + size_t(r)], q4_k_by_hand(p, r, t, 8)) << "row " << r << " token " << t;
      }
      for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
        if (!supports(detect_cpu_features(), isa)) continue;
        for (CpuPrefetch pf : {CpuPrefetch::kSoftware, CpuPrefetch::kHardware}) {
          SCOPED_TRACE(std::string(isa_name(isa)) + ", " + std::string(prefetch_name(pf)) + " prefetch");
          std::vector<float> y;
          RowDotParams q = params(p, y, 0, p.rows);
          q.prefetch = pf;
          row_dot_for(isa, type)(q);
          ASSERT_EQ(y, y_ref);
        }
      }
    }
}

// Who keeps a call's weight stream in flight (asks_for_stream, row_dot.h):
// on the software profile the kernel always; on the hardware one (Zen 4)
// the CPU for one token, and for up to 4 in the x16 layouts' tiles, which
// ask from 5 (the x4 tiles from 2).
TEST(RowDot, AsksForItsStreamByProfileAndTokens) {
  RowDotParams p;
  for (int64_t tokens : {1, 2, 4, 5, 9}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens");
    p.n_tokens = tokens;
    p.prefetch = CpuPrefetch::kSoftware;
    EXPECT_TRUE(asks_for_stream(p, kX16HardwareStreamTokens));
    EXPECT_TRUE(asks_for_stream(p, 1));
    p.prefetch = CpuPrefetch::kHardware;
    EXPECT_EQ(asks_for_stream(p, kX16HardwareStreamTokens), tokens > 4);
    EXPECT_EQ(asks_for_stream(p, 1), tokens > 1);
  }
}

// F32 and BF16 in llama.cpp's AVX-512 orders. BF16: with gemm_order,
// tinyBLAS's one 16-lane accumulator (its GEMM for batches); one token
// without it, ggml_vec_dot_bf16's two accumulators plus the tail past the
// last 64 values. F32: ggml_vec_dot_f32's four accumulators and tail for
// every token count (gemm_order has no effect). The AVX-512 levels
// (avx512bf16 for BF16) give the generic result bit for bit.
TEST(RowDot, FloatRowsSumInLlamaCppsAvx512Orders) {
  std::mt19937 rng(79);
  for (DType type : {DType::kF32, DType::kBF16}) {
    for (int64_t cols : {768, 800, 2080}) {  // 800: a tail of 32 past the last 64; 2080: column blocks
      SCOPED_TRACE(std::string(name(type)) + " cols " + std::to_string(cols));
      const Problem p = make_problem(type, 13, cols, 7, rng);
      std::vector<float> y_gemm_ref, y_ref, y_one_ref;
      RowDotParams pr = params(p, y_gemm_ref, 0, p.rows);
      pr.gemm_order = true;
      generic::find(type)(pr);
      generic::find(type)(params(p, y_ref, 0, p.rows));
      RowDotParams po = params(p, y_one_ref, 0, p.rows);
      po.n_tokens = 1;
      generic::find(type)(po);
      if (type == DType::kBF16) {
        EXPECT_NE(y_gemm_ref, y_ref);  // the orders differ
      }
      for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
        if (!supports(detect_cpu_features(), isa)) continue;
        if (type == DType::kBF16 && isa != CpuIsa::kAvx512Bf16) continue;
        SCOPED_TRACE(std::string(isa_name(isa)));
        std::vector<float> y_gemm, y, y_one;
        RowDotParams pf = params(p, y_gemm, 0, p.rows);
        pf.gemm_order = true;
        row_dot_for(isa, type)(pf);
        EXPECT_EQ(y_gemm, y_gemm_ref);
        RowDotParams pg = params(p, y_one, 0, p.rows);
        pg.n_tokens = 1;
        row_dot_for(isa, type)(pg);
        EXPECT_EQ(y_one, y_one_ref);
        if (type == DType::kF32) {
          row_dot_for(isa, type)(params(p, y, 0, p.rows));
          EXPECT_EQ(y, y_ref);
        }
      }
    }
  }
}

// Tokens enough for two chunks of the avx512bf16 FP8 loop (row_dot.h).
int64_t fp8_two_chunks(int64_t cols) { return kFp8LoopMaxValues / cols + 2; }

// The FP8 tiles, which gemm_order selects at every level (FP8 sums are the
// same either way, so its loop steps aside): the reference for the loop.
RowDotParams fp8_tiles(RowDotParams p) {
  p.gemm_order = true;
  return p;
}

// The first n tokens of p over rows [r0, r1) through the level's FP8 kernel
// (its loop, where it has one), with the weights' marks m or none.
std::vector<float> fp8_first_tokens(CpuIsa isa, const Problem& p, int64_t r0, int64_t r1, int64_t n,
                                    const uint8_t* m) {
  std::vector<float> y;
  RowDotParams pl = params(p, y, r0, r1);
  pl.n_tokens = n;
  pl.fp8_marks = m;
  row_dot_for(isa, DType::kF8E4M3)(pl);
  return y;
}

// Calls of whole scale blocks take their own FP8 loop at the avx512bf16
// level (one or two tokens, and passes of up to four for more, in chunks of
// tokens); it keeps the tiles' order, so every token gives the tiles'
// floats, with the weights' marks or without (every row's block 0 holds
// subnormals), for every pass shape (1 to 4 tokens and a remainder), two
// chunks, and an odd row range (a pair of rows and one left over). Tokens 0
// and 1 share an activation row.
TEST(RowDot, Fp8LoopSumsAsTheTiles) {
  std::mt19937 rng(81);
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    for (int64_t cols : {128, 1024, 7168}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " cols " + std::to_string(cols));
      Problem p = make_problem(DType::kF8E4M3, 23, cols, fp8_two_chunks(cols), rng);
      std::copy(p.a.begin(), p.a.begin() + std::ptrdiff_t(p.a_stride), p.a.begin() + std::ptrdiff_t(p.a_stride));
      std::vector<float> y_tiles;
      row_dot_for(isa, DType::kF8E4M3)(fp8_tiles(params(p, y_tiles, 1, 22)));
      const std::vector<uint8_t> marks = fp8_marks(p), all(marks.size(), 0xFF);
      for (int64_t r = 1; r < 22; ++r) ASSERT_EQ(y_tiles[size_t(r)], y_tiles[size_t(p.rows + 2 + r)]) << "row " << r;
      for (int64_t n : std::vector<int64_t>{1, 2, 3, 4, 5, 7, 9, p.tokens}) {
        for (const uint8_t* m : {static_cast<const uint8_t*>(nullptr), marks.data(), all.data()}) {
          SCOPED_TRACE(std::to_string(n) + " tokens" + (m == marks.data() ? ", marked" : m ? ", all marked" : ""));
          const std::vector<float> y = fp8_first_tokens(isa, p, 1, 22, n, m);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < p.rows + 2; ++r) {
              const size_t i = size_t(t * (p.rows + 2) + r);
              ASSERT_EQ(y[i], y_tiles[i]) << "token " << t << " row " << r;
            }
        }
      }
    }
  }
}

// The FP8 loop widens with bit maps that cannot take +-0, the subnormals and
// NaN; a block holding one goes through the tables, found by its search or by
// the weights' marks. Every such byte, in blocks of the 4-row groups and of
// the remainder row, for one token, two, and five (a pass of four and one):
// the same floats as the tiles, and NaN for NaN at every level (the generic
// kernel's; the fp16 route of avx2 and avx512 once made it finite).
TEST(RowDot, Fp8LoopTakesEveryByteTheBitMapsCannot) {
  std::mt19937 rng(82);
  std::vector<uint8_t> special = {0x00, 0x80, 0x7F, 0xFF};
  for (uint8_t m = 1; m < 8; ++m) special.push_back(m), special.push_back(uint8_t(0x80 | m));
  constexpr int64_t kCols = 384;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    for (size_t k = 0; k < special.size(); ++k) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " byte " + std::to_string(special[k]));
      Problem p = make_problem(DType::kF8E4M3, 9, kCols, 5, rng);
      const int64_t row = int64_t(k % 9), col = 128 * int64_t(1 + k % 2) + int64_t(k * 37 % 128);
      p.w[size_t(row) * p.w_stride + size_t(col)] = special[k];
      std::vector<float> y_tiles;
      row_dot_for(isa, DType::kF8E4M3)(fp8_tiles(params(p, y_tiles, 0, 9)));
      const std::vector<uint8_t> marks = fp8_marks(p);
      for (int64_t n : {1, 2, 5}) {
        for (const uint8_t* m : {static_cast<const uint8_t*>(nullptr), marks.data()}) {
          SCOPED_TRACE(std::to_string(n) + " tokens" + (m ? ", marked" : ""));
          const std::vector<float> y = fp8_first_tokens(isa, p, 0, 9, n, m);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < 9; ++r) {
              const size_t i = size_t(t * (p.rows + 2) + r);
              if ((special[k] & 0x7F) == 0x7F && r == row)
                EXPECT_TRUE(std::isnan(y[i]) && std::isnan(y_tiles[i]))
                    << "token " << t << " row " << r << ": " << y[i] << " " << y_tiles[i];
              else
                EXPECT_EQ(y[i], y_tiles[i]) << "token " << t << " row " << r;
            }
        }
      }
    }
  }
}

// Rows of more than 64 scale blocks: the loop gathers a row group's marks into
// words of 64 blocks, so a marked block in the second word must still go
// through the tables.
TEST(RowDot, Fp8LoopTakesMarkedBlocksPastTheFirst64) {
  if (!supports(detect_cpu_features(), CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no avx512bf16 on this cpu";
  std::mt19937 rng(83);
  Problem p = make_problem(DType::kF8E4M3, 5, 128 * 67, 5, rng);
  p.w[1 * p.w_stride + 128 * 65 + 17] = 0x03;   // a subnormal, row 1, block 65
  p.w[4 * p.w_stride + 128 * 66 + 100] = 0x85;  // a negative one, row 4, block 66
  std::vector<float> y_tiles;
  row_dot_for(CpuIsa::kAvx512Bf16, DType::kF8E4M3)(fp8_tiles(params(p, y_tiles, 0, 5)));
  const std::vector<uint8_t> marks = fp8_marks(p);
  for (int64_t n : {1, 2, 5}) {
    SCOPED_TRACE(std::to_string(n) + " tokens");
    const std::vector<float> y = fp8_first_tokens(CpuIsa::kAvx512Bf16, p, 0, 5, n, marks.data());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < 5; ++r) {
        const size_t i = size_t(t * (p.rows + 2) + r);
        EXPECT_EQ(y[i], y_tiles[i]) << "token " << t << " row " << r;
      }
  }
}

TEST(RowDot, GenericFp8IsTheScaledExactSum) {
  // One row, 256 columns: two scale blocks; every product is exact, so the
  // generic result equals a double-precision sum to f32 rounding.
  std::mt19937 rng(7);
  const Problem p = make_problem(DType::kF8E4M3, 1, 256, 1, rng);
  std::vector<float> y;
  generic::find(DType::kF8E4M3)(params(p, y, 0, 1));
  double want = 0;
  for (int c = 0; c < 256; ++c)
    want += double(p.w_deq[size_t(c)]) * p.a_deq[size_t(c)] * p.scales[size_t(c / 128)];
  EXPECT_NEAR(y[0], want, 1e-6 * abs_dot(p, 0, 0));
}

// Split activations: hi is what convert_row_dot_activations writes, hi + lo
// holds x to 2^-17 of |x| (bf16 alone: 2^-9), at every level; an infinity
// keeps lo = 0; weights whose activations are not bf16 are refused.
TEST(RowDot, SplitActivationsHoldF32ToSixteenBits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int64_t cols = 600;  // chunks of 256 and a rest
  std::vector<float> x(size_t(2 * cols));
  for (auto& v : x) v = nd(rng);
  x[7] = INFINITY;
  x[cols + 9] = -INFINITY;
  const size_t row = row_dot_activation_bytes(DType::kBF16, cols);
  const CpuFeatures f = detect_cpu_features();
  for (int level = 0; level < kCpuIsaCount; ++level) {
    if (!supports(f, CpuIsa(level))) continue;
    SCOPED_TRACE(isa_name(CpuIsa(level)));
    std::vector<uint8_t> split(4 * row), plain(2 * row);
    convert_row_dot_activations_split(DType::kF8E4M3, x.data(), size_t(cols), 2, cols, split.data(), row,
                                      CpuIsa(level));
    convert_row_dot_activations(DType::kBF16, x.data(), size_t(cols), 2, cols, plain.data(), row);
    for (int64_t t = 0; t < 2; ++t) {
      ASSERT_EQ(std::memcmp(split.data() + 2 * t * row, plain.data() + t * row, size_t(2 * cols)), 0);
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h, l;
        std::memcpy(&h, split.data() + 2 * t * row + 2 * c, 2);
        std::memcpy(&l, split.data() + (2 * t + 1) * row + 2 * c, 2);
        const float v = x[size_t(t * cols + c)];
        if (std::isinf(v)) {
          EXPECT_EQ(bf16_to_f32(h), v);
          EXPECT_EQ(bf16_to_f32(l), 0.0f);
          continue;
        }
        const double err = std::fabs(double(bf16_to_f32(h)) + bf16_to_f32(l) - v);
        ASSERT_LE(err, std::ldexp(std::fabs(v), -17)) << t << " " << c << " " << v;
      }
    }
  }
  std::vector<uint8_t> out(4 * row_dot_activation_bytes(DType::kQ8_0, 64));
  EXPECT_THROW(convert_row_dot_activations_split(DType::kQ8_0, x.data(), 64, 1, 64, out.data(), out.size() / 2),
               Error);
}

TEST(RowDot, LowerLevelsServeTypesAVariantLacks) {
  EXPECT_EQ(row_dot_level(CpuIsa::kAvx512Bf16, DType::kQ5_0), CpuIsa::kGeneric);
  EXPECT_EQ(row_dot_level(CpuIsa::kAvx512Bf16, DType::kBF16), CpuIsa::kAvx512Bf16);
  EXPECT_EQ(row_dot_level(CpuIsa::kAmx, DType::kBF16), CpuIsa::kAmx);
  EXPECT_EQ(row_dot_level(CpuIsa::kAmx, DType::kQ4_K), CpuIsa::kAvx512Bf16);
  EXPECT_EQ(row_dot_level(CpuIsa::kAvx2, DType::kQ4_K), CpuIsa::kAvx2);
  EXPECT_EQ(row_dot_level(CpuIsa::kGeneric, DType::kQ4_K), CpuIsa::kGeneric);
  EXPECT_THROW(row_dot_for(CpuIsa::kAvx2, DType::kI32), Error);
}

TEST(RowDot, ChecksRefuseBadShapes) {
  EXPECT_THROW(row_dot_activation_bytes(DType::kQ4_K, 100), Error);
  EXPECT_THROW(row_dot_activation_bytes(DType::kQ8_0, 33), Error);
  EXPECT_EQ(row_dot_activation_bytes(DType::kBF16, 33) % 64, 0u);
  std::mt19937 rng(3);
  Problem p = make_problem(DType::kBF16, 6, 64, 2, rng);
  std::vector<float> y;
  RowDotParams rp = params(p, y, 0, 7);
  EXPECT_THROW(row_dot_check(rp), Error);
  rp = params(p, y, 0, 6);
  rp.a_row_bytes = 8;
  EXPECT_THROW(row_dot_check(rp), Error);
  rp = params(p, y, 0, 6);
  EXPECT_NO_THROW(row_dot_check(rp));
  const uint8_t marks[6] = {};
  rp.fp8_marks = marks;  // FP8 marks for BF16 weights
  EXPECT_THROW(row_dot_check(rp), Error);
}

}  // namespace
}  // namespace tandem::kernels
