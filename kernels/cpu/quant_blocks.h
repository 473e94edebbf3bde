// Block layouts of ggml's quantised types, byte for byte as in llama.cpp's
// ggml-common.h, so that tensor data mapped from a GGUF file can be read
// through these structs directly. Every size is pinned by a static_assert:
// a padding byte here would silently misread every block after the first.
//
// Halves (fp16) are stored as raw uint16_t bit patterns; convert them with
// fp16_to_f32() from float_convert.h. All multi-byte fields are
// little-endian, as GGUF is (we only build for little-endian hosts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tandem::kernels {

// Reads a T from bytes with no alignment guarantee: tensor data in a mapped
// file, and packed blocks (34-byte Q8_0) in workspaces, cannot be cast to
// struct pointers, so fields and whole blocks are copied out with memcpy.
template <typename T>
T load_unaligned(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = 256;       // super-block size of the k-quants
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales+mins of Q4_K/Q5_K

// value = d * (q - 8); q is 4 bits. Element j of the low nibbles is x[j],
// of the high nibbles x[j + 16].
struct BlockQ4_0 {
  uint16_t d;                // fp16 scale
  uint8_t qs[kQK4_0 / 2];    // nibbles
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes");
static_assert(offsetof(BlockQ4_0, qs) == 2);

// value = d * q; q is int8.
struct BlockQ8_0 {
  uint16_t d;                // fp16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");
static_assert(offsetof(BlockQ8_0, qs) == 2);

// value = d * (q - 16); q is 5 bits: low 4 in qs (as Q4_0), bit 4 of
// element j in bit j of the little-endian uint32 qh.
struct BlockQ5_0 {
  uint16_t d;                // fp16 scale
  uint8_t qh[4];             // 5th bits; a byte array because it is unaligned
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must be 22 bytes");
static_assert(offsetof(BlockQ5_0, qh) == 2 && offsetof(BlockQ5_0, qs) == 6);

// 8 sub-blocks of 32. value = d*sc[j]*q - dmin*m[j]; sc/m are 6-bit, packed
// into scales[12] (see get_scale_min_k4 in dequant.cpp); q is 4 bits.
struct BlockQ4_K {
  uint16_t d;                // fp16 super-scale of the sub-block scales
  uint16_t dmin;             // fp16 super-scale of the sub-block mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes");
static_assert(offsetof(BlockQ4_K, scales) == 4 && offsetof(BlockQ4_K, qs) == 16);

// Unpacks the 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K, as
// ggml's get_scale_min_k4. Bytes 0-3 hold sc[0..3] in their low 6 bits and
// bytes 4-7 m[0..3]; sub-blocks 4-7 keep their low 4 bits in the nibbles of
// bytes 8-11 (sc low, m high) and their top 2 bits in the spare top bits of
// bytes 0-3 (sc) and 4-7 (m).
inline void k4_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// As Q4_K with a 5th bit per value in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes");
static_assert(offsetof(BlockQ5_K, qh) == 16 && offsetof(BlockQ5_K, qs) == 48);

// 16 sub-blocks of 16. value = d * scales[j] * (q - 32); q is 6 bits: low 4
// in ql, high 2 in qh. Note d comes LAST in this block, unlike the others.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;                // fp16
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes");
static_assert(offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 &&
              offsetof(BlockQ6_K, d) == 208);

// value = d * q. Used by ggml for activations; bsums[j] is the sum of
// qs[16j .. 16j+15], precomputed for dot products with k-quant mins.
struct BlockQ8_K {
  float d;                   // f32, not fp16
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block must be 292 bytes");
static_assert(offsetof(BlockQ8_K, qs) == 4 && offsetof(BlockQ8_K, bsums) == 260);

}  // namespace tandem::kernels
