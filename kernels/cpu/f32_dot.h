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

// The f32 dot products of ggml-cpu on AVX-512, fed one product at a time:
//  - kGemm, llamafile's tinyBLAS<16> (mul_mat of several tokens, rows a
//    multiple of 16): lane i % 16 accumulates by fma, then reduce16;
//  - kGemv, ggml_vec_dot_f32 (one token): four 16-lane vectors over each 64
//    values, folded (0+2, 1+3, 0+1) and reduced, then the values past the
//    last whole 64 added in double.
enum class F32Reduction { kGemm, kGemv };

template <F32Reduction R>
class F32Dot {
 public:
  explicit F32Dot(int64_t n) : whole_(R == F32Reduction::kGemv ? n & ~int64_t{63} : n) {}
  void add(float w, float x) {
    if (i_ < whole_)
      acc_[i_ % kLanes] = std::fma(w, x, acc_[i_ % kLanes]);
    else
      tail_ += static_cast<double>(w * x);
    ++i_;
  }
  float result() const {
    if constexpr (R == F32Reduction::kGemm) return reduce16(acc_);
    float v[16];
    for (int l = 0; l < 16; ++l) v[l] = (acc_[l] + acc_[32 + l]) + (acc_[16 + l] + acc_[48 + l]);
    return static_cast<float>(static_cast<double>(reduce16(v)) + tail_);
  }

 private:
  static constexpr int kLanes = R == F32Reduction::kGemm ? 16 : 64;
  float acc_[kLanes] = {};
  double tail_ = 0.0;
  int64_t whole_, i_ = 0;
};

}  // namespace tandem::kernels
