// Hand-built Q8_0, Q4_K and Q6_K blocks whose matmul results are worked out
// by hand from ggml's block formulas: a wrong bit layout or scale fails here
// with a readable expectation rather than as a statistical bound.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"

namespace tandem::kernels {
namespace {

// Two Q8_0 blocks whose activations quantise to known bytes (block scales
// 1 and 2), so the result is exact: ggml's per block sum(q_w*q_x)*d_w*d_x.
TEST(Matmul, Q8_0ByHand) {
  BlockQ8_0 wb[2]{};
  wb[0].d = 0x3800;  // 0.5
  wb[0].qs[0] = 2, wb[0].qs[1] = -3, wb[0].qs[31] = 127;
  wb[1].d = 0x3400;  // 0.25
  wb[1].qs[0] = 4, wb[1].qs[1] = 8, wb[1].qs[2] = -1;

  std::vector<float> x(64, 5.0f);
  x[0] = 127, x[1] = 10, x[31] = -1;  // amax 127: d = 1, q = x
  for (int i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 4;
  x[32] = 254, x[33] = -6;  // amax 254: d = 2, q = x / 2

  std::vector<uint8_t> ws(matmul_workspace_bytes(DType::kQ8_0, 64, 1));
  ASSERT_EQ(ws.size(), 2 * sizeof(BlockQ8_0));
  float y = 0;
  MatmulParams p;
  p.wtype = DType::kQ8_0;
  p.w = wb, p.rows = 1, p.cols = 64, p.w_row_stride = sizeof(wb);
  p.x = x.data(), p.n_tokens = 1, p.x_row_stride = 64;
  p.y = &y, p.y_row_stride = 1;
  p.workspace = ws.data(), p.workspace_bytes = ws.size();
  matmul_generic(p);

  // The converted activations, byte for byte.
  BlockQ8_0 a[2];
  std::memcpy(a, ws.data(), sizeof(a));
  EXPECT_EQ(a[0].d, 0x3C00);  // 1.0
  EXPECT_EQ(a[0].qs[0], 127);
  EXPECT_EQ(a[0].qs[1], 10);
  EXPECT_EQ(a[0].qs[2], 5);
  EXPECT_EQ(a[0].qs[31], -1);
  EXPECT_EQ(a[1].d, 0x4000);  // 2.0
  EXPECT_EQ(a[1].qs[0], 127);
  EXPECT_EQ(a[1].qs[1], -3);
  EXPECT_EQ(a[1].qs[2], 2);

  // Block 0: 0.5 * 1 * (2*127 + -3*10 + 127*-1)       = 0.5 * 97  = 48.5
  // Block 1: 0.25 * 2 * (4*127 + 8*-3 + -1*2)          = 0.5 * 482 = 241
  EXPECT_EQ(y, 289.5f);
}

// One Q4_K super-block with three non-zero sub-blocks, one of them (4) using
// the high bits of the packed 6-bit scale and min. Activations are integers
// with amax 127 at a positive value, so Q8_K gets d = -1, q = -x.
TEST(Matmul, Q4_KByHand) {
  BlockQ4_K b{};
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  // Sub-block 0: sc 2, m 3 (+ bits 4-5 of sub-block 4's sc: 1, m: 2).
  b.scales[0] = 2 | (1 << 6);
  b.scales[4] = 3 | (2 << 6);
  b.scales[1] = 1;     // sub-block 1: sc 1
  b.scales[5] = 0;     //              m 0
  b.scales[8] = 0x11;  // sub-block 4: sc low 1 -> 1|16 = 17, m low 1 -> 1|32 = 33
  b.qs[0] = 0x35;      // value 0: 5, value 32: 3
  b.qs[1] = 0x0F;      // value 1: 15, value 33: 0
  b.qs[64] = 0x07;     // value 128: 7

  // The weights, by ggml's formula d*sc*q - dmin*m, as dequantize_generic has them:
  //   sub-block 0 (0..31):    2q - 1.5   -> w0 = 8.5, w1 = 28.5, rest -1.5
  //   sub-block 1 (32..63):   q          -> w32 = 3, rest 0
  //   sub-block 4 (128..159): 17q - 16.5 -> w128 = 102.5, rest -16.5
  //   other sub-blocks: sc = m = 0       -> 0
  float wd[256];
  dequantize_generic(DType::kQ4_K, &b, wd, 256);
  EXPECT_EQ(wd[0], 8.5f);
  EXPECT_EQ(wd[1], 28.5f);
  EXPECT_EQ(wd[2], -1.5f);
  EXPECT_EQ(wd[32], 3.0f);
  EXPECT_EQ(wd[33], 0.0f);
  EXPECT_EQ(wd[128], 102.5f);
  EXPECT_EQ(wd[129], -16.5f);
  EXPECT_EQ(wd[64], 0.0f);
  EXPECT_EQ(wd[200], 0.0f);

  std::vector<float> x(256, 3.0f);  // 3 where the weights are 0
  x[0] = 127, x[1] = 2;
  for (int i = 2; i < 32; ++i) x[static_cast<size_t>(i)] = 1;
  x[32] = 4;
  for (int i = 33; i < 64; ++i) x[static_cast<size_t>(i)] = 0;
  x[128] = -1;
  for (int i = 129; i < 160; ++i) x[static_cast<size_t>(i)] = 2;

  std::vector<uint8_t> ws(matmul_workspace_bytes(DType::kQ4_K, 256, 1));
  ASSERT_EQ(ws.size(), sizeof(BlockQ8_K));
  float y = 0;
  MatmulParams p;
  p.wtype = DType::kQ4_K;
  p.w = &b, p.rows = 1, p.cols = 256, p.w_row_stride = sizeof(b);
  p.x = x.data(), p.n_tokens = 1, p.x_row_stride = 256;
  p.y = &y, p.y_row_stride = 1;
  p.workspace = ws.data(), p.workspace_bytes = ws.size();
  matmul_generic(p);

  BlockQ8_K a;
  std::memcpy(&a, ws.data(), sizeof(a));
  EXPECT_EQ(a.d, -1.0f);
  EXPECT_EQ(a.qs[0], -127);
  EXPECT_EQ(a.bsums[0], -(127 + 2 + 14));  // values 0..15
  EXPECT_EQ(a.bsums[8], -(-1 + 15 * 2));   // values 128..143

  // sum w*x:
  //   sub-block 0: 8.5*127 + 28.5*2 - 1.5*30*1 = 1079.5 + 57 - 45 = 1091.5
  //   sub-block 1: 3*4                                             =   12
  //   sub-block 4: 102.5*-1 - 16.5*31*2        = -102.5 - 1023     = -1125.5
  // ggml's route: d*sum sc*isum = -1 * (2*(5*-127 + 15*-2) + 1*(3*-4) + 17*(7*1)) = 1223,
  // minus dmin*d_x * sum m*bsums = -0.5 * (3*-159 + 33*-61) = 1245.
  EXPECT_EQ(y, -22.0f);
}

// One Q6_K super-block: two sub-blocks with non-zero scales (one negative),
// a quant in each set through both ql and qh. Unset quants decode to -32.
TEST(Matmul, Q6_KByHand) {
  BlockQ6_K b{};
  b.d = 0x3800;  // 0.5
  b.scales[0] = 3;
  b.scales[5] = -2;
  b.ql[0] = 0x08, b.qh[0] = 0x02;    // value 0: 8 | 2<<4 = 40 -> +8
  b.ql[16] = 0x40, b.qh[16] = 0x10;  // value 80 (h 0, l 16, k 2): 4 | 1<<4 = 20 -> -12
  float wd[256];
  dequantize_generic(DType::kQ6_K, &b, wd, 256);
  EXPECT_EQ(wd[0], 12.0f);   // 0.5*3*8
  EXPECT_EQ(wd[1], -48.0f);  // 0.5*3*-32
  EXPECT_EQ(wd[80], 12.0f);  // 0.5*-2*-12
  EXPECT_EQ(wd[81], 32.0f);  // 0.5*-2*-32
  EXPECT_EQ(wd[16], 0.0f);

  std::vector<float> x(256, 5.0f);  // where the weights are 0
  x[0] = 127;
  for (int i = 1; i < 16; ++i) x[static_cast<size_t>(i)] = 1;
  x[80] = 2;
  for (int i = 81; i < 96; ++i) x[static_cast<size_t>(i)] = -1;
  std::vector<uint8_t> ws(matmul_workspace_bytes(DType::kQ6_K, 256, 1));
  float y = 0;
  MatmulParams p;
  p.wtype = DType::kQ6_K;
  p.w = &b, p.rows = 1, p.cols = 256, p.w_row_stride = sizeof(b);
  p.x = x.data(), p.n_tokens = 1, p.x_row_stride = 256;
  p.y = &y, p.y_row_stride = 1;
  p.workspace = ws.data(), p.workspace_bytes = ws.size();
  matmul_generic(p);
  // 12*127 - 48*15 + 12*2 + 32*-15 = 1524 - 720 + 24 - 480
  EXPECT_EQ(y, 348.0f);
}

}  // namespace
}  // namespace tandem::kernels
