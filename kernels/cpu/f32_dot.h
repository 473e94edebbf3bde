// ggml-cpu's f32 reductions on x86 with AVX-512, reproduced operation by
// operation, so that sums which feed a rounding step (an fp16 attention
// accumulator, a Q8 activation quant) round as llama.cpp's do. The
// correctness fixtures are llama.cpp's outputs, and one flipped rounding
// there moves logits by 1e-2 to 1e-1.
#pragma once

#include <cmath>
#include <cstdint>

namespace tandem::kernels {

// _mm512_reduce_add_ps's order (GCC): halves, quarters, then pairs.
inline float reduce16(const float v[16]) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = v[8 + i] + v[i];
  for (int i = 0; i < 4; ++i) t4[i] = t8[4 + i] + t8[i];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

// ggml_vec_dot_f32 / ggml_vec_dot_f16 on AVX-512, fed one product at a
// time: four 16-lane vectors accumulate each run of 64 values by fma, are
// folded (0+2, 1+3, 0+1) and reduced; the values past the last whole 64 are
// then added in double. (For a MUL_MAT of several tokens llama.cpp takes
// tinyBLAS, one 16-lane accumulator; we keep this order for every batch so
// that an F32 prompt in one pass equals its tokens one at a time.)
class F32Dot {
 public:
  explicit F32Dot(int64_t n) : whole_(n & ~int64_t{63}) {}
  void add(float w, float x) {
    if (i_ < whole_)
      acc_[i_ % 64] = std::fma(w, x, acc_[i_ % 64]);
    else
      tail_ += static_cast<double>(w * x);
    ++i_;
  }
  float result() const {
    float v[16];
    for (int l = 0; l < 16; ++l) v[l] = (acc_[l] + acc_[32 + l]) + (acc_[16 + l] + acc_[48 + l]);
    return static_cast<float>(static_cast<double>(reduce16(v)) + tail_);
  }

 private:
  float acc_[64] = {};
  double tail_ = 0.0;
  int64_t whole_, i_ = 0;
};

// ggml_vec_dot_bf16 on AVX-512 BF16: two accumulators over each run of 64
// values (values 0-31 and 32-63), where _mm512_dpbf16_ps adds to lane j the
// products of values 2j+1 and then 2j, rounding after each (the products of
// two bf16 are exact in f32); each accumulator is reduced and added in
// double, then the values past the last whole 64.
class Bf16Dot {
 public:
  explicit Bf16Dot(int64_t n) : whole_(n & ~int64_t{63}) {}
  // Values come in pairs (2j, 2j+1) of a run; w and x are bf16 values.
  void add_pair(float w0, float x0, float w1, float x1) {
    if (i_ < whole_) {
      float& lane = acc_[(i_ % 64) / 32][(i_ % 32) / 2];
      lane += w1 * x1;
      lane += w0 * x0;
    } else {
      tail_ += static_cast<double>(w0 * x0);
      tail_ += static_cast<double>(w1 * x1);
    }
    i_ += 2;
  }
  float result() const {
    double sum = static_cast<double>(reduce16(acc_[0]));
    sum += static_cast<double>(reduce16(acc_[1]));
    return static_cast<float>(sum + tail_);
  }

 private:
  float acc_[2][16] = {};
  double tail_ = 0.0;
  int64_t whole_, i_ = 0;
};

}  // namespace tandem::kernels
