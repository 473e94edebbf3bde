// One query row against the cached keys and values, computed the way
// llama.cpp's CPU flash attention does (its default for these models): keys,
// values and the query in fp16, scores summed in ggml_vec_dot_f16's order,
// an online softmax whose running value sum is kept in an fp16 buffer (fused
// multiply-add, then fp16), divided by the softmax sum at the end. Matching it matters: the correctness fixtures are
// llama.cpp's outputs, and fp16 rounding of attention is visible in logits.
// ggml is built by GCC for the host CPU, whose default -ffp-contract=fast
// fuses scalar a*b + c into one fma; this code is built for baseline x86-64,
// so such sums are written as std::fma where ggml's are (the running softmax
// sum here, the rotation in RoPE). One rounding more moves a value by an ulp,
// which is enough to flip a later Q8 or fp16 rounding.
#pragma once

#include <cstdint>

namespace tandem::engine {

struct AttentionRow {
  const float* q;        // dk values, already fp16-representable
  const float* keys;     // position j's key at keys + j * key_stride
  int64_t key_stride;
  const float* values;   // position j's value at values + j * value_stride
  int64_t value_stride;
  int64_t dk, dv;
  int64_t n_positions;   // causal: keys 0 .. n_positions - 1
  float scale;
  float* out;            // dv values
};

void attend(const AttentionRow& a);

// Rounds to the nearest fp16 value (what a cast to an F16 cache stores).
void round_to_fp16(float* x, int64_t n);

}  // namespace tandem::engine
