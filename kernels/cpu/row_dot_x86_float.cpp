// The float row dots of one level (see row_dot_x86_tile.h): F32, BF16 and
// FP8 E4M3 with 128x128 block scales, widened to f32 lanes, or through
// vdpbf16ps at the avx512bf16 level.
#include "kernels/cpu/fp8_tables.h"
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
namespace {

// ---- F32, BF16 (widened), FP8 (widened) ------------------------------------------
// Load(p, i) gives kLanes weights from element i; the activation rows are
// f32 (F32) or bf16 (BF16, FP8), AL gives them.
struct LoadF32 {
  static constexpr int kBytes = 4;
  static VF w(const uint8_t* p) { return load_f32(p); }
  static VF a(const uint8_t* p) { return load_f32(p); }
};
struct LoadBf16 {
  static constexpr int kBytes = 2;
  static VF w(const uint8_t* p) { return load_bf16(p); }
  static VF a(const uint8_t* p) { return load_bf16(p); }
};

template <class L, int R, int T>
void widened_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
                  VF (&acc)[R][T], const Ahead& ah) {
  constexpr int B = L::kBytes;
  int64_t c = c0;
  for (; c + kLanes <= c1; c += kLanes) {
    VF wv[R];
    if ((B * c) % 64 < B * kLanes)  // once per 64 bytes
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) ah.at(w[i], B * c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = L::w(w[i] + B * c);
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const VF av = L::a(a[j] + B * c);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = vfma(wv[i], av, acc[i][j]);
    }
  }
  if (c < c1) {
    const size_t n = size_t(c1 - c) * B;
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      Tail tw;
      const VF wv = L::w(tw.from(w[i] + B * c, n));
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        Tail ta;
        acc[i][j] = vfma(wv, L::a(ta.from(a[j] + B * c, n)), acc[i][j]);
      }
    }
  }
}

template <class L>
struct Widened {
  template <int R, int T>
  struct Tile {
    static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w,
                    const uint8_t* const* a, float (&out)[R][T], const Ahead& ah) {
      VF acc[R][T];
      #pragma GCC unroll 8
      for (auto& row : acc)
        #pragma GCC unroll 8
        for (auto& v : row) v = vzero();
      widened_span<L, R, T>(w, a, 0, p.cols, acc, ah);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
        #pragma GCC unroll 8
        for (int j = 0; j < T; ++j) out[i][j] = vsum(acc[i][j]);
    }
  };
};
template <int R, int T> using F32Tile = Widened<LoadF32>::template Tile<R, T>;

// The row sum of these tiles is tinyBLAS's (llama.cpp's GEMM for batches):
// one accumulator per dot. At the AVX-512 levels F32 always, and BF16 for
// one token, are summed in ggml's vec_dot order instead (the generic one).
#if defined(__AVX512F__)
// ggml_vec_dot_f32: four 16-lane fma accumulators over each run of 64,
// folded (0+2)+(1+3) and reduced; the values past the last 64 in double.
// R rows x T tokens.
template <int R, int T>
void f32_vec_dot(int64_t cols, const uint8_t* const* w, const uint8_t* const* a, float (*out)[T],
                 const Ahead& ah) {
  __m512 acc[R][T][4];
  #pragma GCC unroll 8
  for (auto& row : acc)
    #pragma GCC unroll 8
    for (auto& t : row)
      #pragma GCC unroll 4
      for (auto& v : t) v = _mm512_setzero_ps();
  const int64_t whole = cols & ~int64_t{63};
  for (int64_t c = 0; c < whole; c += 64) {
    #pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m512 wv[R];
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        ah.at(w[i], 4 * (c + 16 * k));
        wv[i] = _mm512_loadu_ps(w[i] + 4 * (c + 16 * k));
      }
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m512 av = _mm512_loadu_ps(a[j] + 4 * (c + 16 * k));
        #pragma GCC unroll 8
        for (int i = 0; i < R; ++i) acc[i][j][k] = _mm512_fmadd_ps(wv[i], av, acc[i][j][k]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m512 v = _mm512_add_ps(_mm512_add_ps(acc[i][j][0], acc[i][j][2]),
                                     _mm512_add_ps(acc[i][j][1], acc[i][j][3]));
      double tail = 0.0;
      for (int64_t c = whole; c < cols; ++c)
        tail += double(load_unaligned<float>(w[i] + 4 * c) * load_unaligned<float>(a[j] + 4 * c));
      out[i][j] = float(double(_mm512_reduce_add_ps(v)) + tail);
    }
}
// Four accumulators a dot: a tile of more than 4 dots runs row by row, so
// they stay in registers (each weight byte is still loaded once per tile).
template <int R, int T>
struct F32VecDotTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    if constexpr (R * T <= 4) {
      f32_vec_dot<R, T>(p.cols, w, a, out, ah);
    } else {
      #pragma GCC unroll 4
      for (int i = 0; i < R; ++i) f32_vec_dot<1, T>(p.cols, w + i, a, out + i, ah);
    }
  }
};
void f32_rows(const RowDotParams& p) { drive<F32VecDotTile>(p); }
#else
void f32_rows(const RowDotParams& p) { drive<F32Tile>(p); }
#endif

// FP8: each level's span (below) adds columns c0..c1 of a scale block into
// acc; Fp8BlockTile (row_dot_x86_tile.h) makes it the level's Fp8Tile.
template <int R, int T>
void fp8_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1, VF (&acc)[R][T],
              const Ahead& ah);
struct Fp8Span {
  template <int R, int T>
  static void run(const RowDotParams&, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  int64_t c0, int64_t c1, VF (&acc)[R][T], const Ahead& ah) {
    fp8_span<R, T>(w, a, c0, c1, acc, ah);
  }
};

#if defined(__AVX512BF16__)
// bf16 pairs with vdpbf16ps: 32 values per instruction.
inline __m512i load_w_bf16x32(const uint8_t* p) { return _mm512_loadu_si512(p); }
// 32 FP8 values as bf16. Sign-extended to 16 bits, shifted by 4 and masked
// (0x87F0), an FP8 lands in bf16's sign, exponent and mantissa fields with
// its exponent bias 120 short, which one add restores; the sign bit is clear
// of the add's carries. The 7 subnormal magnitudes (m * 2^-9), whose exponent
// field is 0, come from a table instead (vdpbf16ps would flush bf16
// subnormals anyway), with the sign put back.
inline __m512i load_fp8_as_bf16x32(const uint8_t* p) {
  const __m512i s = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  __m512i v = _mm512_add_epi16(_mm512_and_si512(_mm512_slli_epi16(s, 4), _mm512_set1_epi16(int16_t(0x87F0))),
                               _mm512_set1_epi16(120 << 7));
  const __m512i sub = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0, 0, 0, 0, 0x3C60, 0x3C40, 0x3C20, 0x3C00, 0x3BC0, 0x3B80,
                                       0x3B00, 0);
  const __mmask32 tiny = _mm512_testn_epi16_mask(s, _mm512_set1_epi16(0x78));
  v = _mm512_mask_permutexvar_epi16(v, tiny, s, sub);  // index: the low 5 bits, 0mmm
  // v | (s & 0x8000): the sign, for the table's lanes
  return _mm512_ternarylogic_epi32(v, s, _mm512_set1_epi16(int16_t(0x8000)), 0xF8);
}

// Columns [c0, c1) of bf16 activations against weights given as bf16 by
// LoadW (32 at a time), with vdpbf16ps.
template <int WB, __m512i (*LoadW)(const uint8_t*), int R, int T>
void dpbf16_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
                 __m512 (&acc)[R][T], const Ahead& ah) {
  int64_t c = c0;
  for (; c + 32 <= c1; c += 32) {
    __m512i wv[R];
    if (WB == 2 || (c & 63) == 0)
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) ah.at(w[i], WB * c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = LoadW(w[i] + WB * c);
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m512bh av = (__m512bh)_mm512_loadu_si512(a[j] + 2 * c);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)wv[i], av);
    }
  }
  if (c < c1) {
    const size_t n = size_t(c1 - c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      Tail tw;
      const __m512i wv = LoadW(tw.from(w[i] + WB * c, n * WB));
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        Tail ta;
        const __m512bh av = (__m512bh)_mm512_loadu_si512(ta.from(a[j] + 2 * c, n * 2));
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)wv, av);
      }
    }
  }
}

template <int R, int T>
struct Bf16Tile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    __m512 acc[R][T];
    #pragma GCC unroll 8
    for (auto& row : acc)
      #pragma GCC unroll 8
      for (auto& v : row) v = _mm512_setzero_ps();
    dpbf16_span<2, load_w_bf16x32, R, T>(w, a, 0, p.cols, acc, ah);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
  }
};

// ggml_vec_dot_bf16 on AVX-512 BF16: two vdpbf16ps accumulators, values
// 0-31 and 32-63 of each run of 64, each reduced and added in double; the
// values past the last 64 in double. RR rows x T tokens.
template <int RR, int T>
void bf16_vec_dot(int64_t cols, const uint8_t* const* w, const uint8_t* const* a, float (*out)[T],
                  const Ahead& ah) {
  __m512 c1[RR][T], c2[RR][T];
  #pragma GCC unroll 8
  for (int i = 0; i < RR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) c1[i][j] = c2[i][j] = _mm512_setzero_ps();
  const int64_t whole = cols & ~int64_t{63};
  for (int64_t c = 0; c < whole; c += 64) {
    __m512i w0[RR], w1[RR];
    #pragma GCC unroll 8
    for (int i = 0; i < RR; ++i) {
      ah.at(w[i], 2 * c);
      ah.at(w[i], 2 * c + 64);
      w0[i] = _mm512_loadu_si512(w[i] + 2 * c);
      w1[i] = _mm512_loadu_si512(w[i] + 2 * c + 64);
    }
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m512bh a0 = (__m512bh)_mm512_loadu_si512(a[j] + 2 * c);
      const __m512bh a1 = (__m512bh)_mm512_loadu_si512(a[j] + 2 * c + 64);
      #pragma GCC unroll 8
      for (int i = 0; i < RR; ++i) {
        c1[i][j] = _mm512_dpbf16_ps(c1[i][j], (__m512bh)w0[i], a0);
        c2[i][j] = _mm512_dpbf16_ps(c2[i][j], (__m512bh)w1[i], a1);
      }
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < RR; ++i)
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      double tail = 0.0;
      for (int64_t c = whole; c < cols; ++c)
        tail += double(bf16_to_f32(load_unaligned<uint16_t>(w[i] + 2 * c)) *
                       bf16_to_f32(load_unaligned<uint16_t>(a[j] + 2 * c)));
      const double sum = double(_mm512_reduce_add_ps(c1[i][j])) + double(_mm512_reduce_add_ps(c2[i][j]));
      out[i][j] = float(sum + tail);
    }
}
// Only one-token calls come here (bf16_rows), so a tile holds at most R * 2
// accumulators.
template <int R, int T>
struct Bf16VecDotTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    bf16_vec_dot<R, T>(p.cols, w, a, out, ah);
  }
};
// vec_dot's order for one token (decode: llama.cpp's, bit for bit); a call
// of several tokens that did not ask for gemm_order (the experts' prefill,
// which llama.cpp also multiplies with vec_dot) keeps the one-accumulator
// tile, whose registers hold 4 tokens: the vec_dot tile at 4 tokens ran
// BF16 prefill 30-45% slower (tandem-bench-moe, 256 tokens).
void bf16_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kBf16X16)
    bf16_x16_rows(p);
  else if (p.layout == WeightLayout::kBf16X16Z)
    bf16_x16z_rows(p);
  else if (p.gemm_order || p.n_tokens > 1)
    drive<Bf16Tile>(p);
  else
    drive<Bf16VecDotTile>(p);
}

#if defined(__AVX512VBMI__)
// FP8 -> bf16 through two 128-entry byte tables (fp8_tables.h's
// Fp8Widener, subnormals included), which yields each 64 columns' bf16
// values in two permuted halves; the activations are permuted (vpermt2w)
// the same way, once per token for all R rows. 8 instructions per 64
// weights where the arithmetic conversion took 18.
template <int R, int T>
void fp8_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
              __m512 (&acc)[R][T], const Ahead& ah) {
  const Fp8Widener fp8;
  const __m512i order_a = _mm512_load_si512(kFp8OrderA), order_b = _mm512_load_si512(kFp8OrderB);
  auto step = [&](const uint8_t* const* wp, const uint8_t* const* ap) {
    __m512i xa[T], xb[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i x0 = _mm512_loadu_si512(ap[t]), x1 = _mm512_loadu_si512(ap[t] + 64);
      xa[t] = _mm512_permutex2var_epi16(x0, order_a, x1);
      xb[t] = _mm512_permutex2var_epi16(x0, order_b, x1);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      __m512i wa, wb;
      fp8.widen(_mm512_loadu_si512(wp[i]), wa, wb);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        acc[i][t] = _mm512_dpbf16_ps(acc[i][t], (__m512bh)wa, (__m512bh)xa[t]);
        acc[i][t] = _mm512_dpbf16_ps(acc[i][t], (__m512bh)wb, (__m512bh)xb[t]);
      }
    }
  };
  int64_t c = c0;
  for (; c + 64 <= c1; c += 64) {
    const uint8_t* wp[R];
    const uint8_t* ap[T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      wp[i] = w[i] + c;
      ah.at(w[i], size_t(c));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) ap[t] = a[t] + 2 * c;
    step(wp, ap);
  }
  if (c < c1) {  // a ragged end: zero-padded copies
    const size_t n = size_t(c1 - c);
    Tail tw[R], ta[T];
    const uint8_t* wp[R];
    const uint8_t* ap[T];
    for (int i = 0; i < R; ++i) wp[i] = tw[i].from(w[i] + c, n);
    for (int t = 0; t < T; ++t) ap[t] = ta[t].from(a[t] + 2 * c, 2 * n);
    step(wp, ap);
  }
}


#else
template <int R, int T>
void fp8_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
              __m512 (&acc)[R][T], const Ahead& ah) {
  dpbf16_span<1, load_fp8_as_bf16x32, R, T>(w, a, c0, c1, acc, ah);
}
#endif

// fp8_span's sums are the values themselves (bf16 products).
template <int R, int T> using Fp8Tile = Fp8BlockTile<Fp8Span, 1.0f, R, T>;

// drive<Fp8Tile>, or the bit-map loop where it takes the call (whole scale
// blocks, up to kFp8LoopMaxCols columns; row_dot_x86_fp8_loop.cpp).
void fp8_rowmajor(const RowDotParams& p) {
  if (!try_fp8_loop(p)) drive<Fp8Tile>(p);
}
void fp8_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kFp8X16)
    fp8_x16_rows(p);
  else
    fp8_rowmajor(p);
}
#else
void bf16_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kBf16X16)
    bf16_x16_rows(p);  // the reference, below avx512bf16
  else if (p.layout == WeightLayout::kBf16X16Z)
    bf16_x16z_rows(p);  // the reference, below avx512bf16
  else
#if defined(__AVX512F__)
    drive<Widened<LoadBf16>::template Tile>(p);  // 32 registers hold its 4 x 4 sums
#else
    bf16_pair_rows(p);  // a column pair per lane: row_dot_x86_bf16_pairs.cpp
#endif
}

struct LoadFp8 {
  static constexpr int kBytes = 1;
  static VF w(const uint8_t* p) { return load_fp8_scaled(p); }
  static VF a(const uint8_t* p) { return load_bf16(p); }
};
// The activation pointer advances by 2 bytes per value, the weights by 1.
template <int R, int T>
void fp8_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
              VF (&acc)[R][T], const Ahead& ah) {
  int64_t c = c0;
  for (; c + kLanes <= c1; c += kLanes) {
    VF wv[R];
    if ((c & 63) == 0)
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) ah.at(w[i], size_t(c));
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = load_fp8_scaled(w[i] + c);
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const VF av = load_bf16(a[j] + 2 * c);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = vfma(wv[i], av, acc[i][j]);
    }
  }
  if (c < c1) {
    const size_t n = size_t(c1 - c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      Tail tw;
      const VF wv = load_fp8_scaled(tw.from(w[i] + c, n));
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        Tail ta;
        acc[i][j] = vfma(wv, load_bf16(ta.from(a[j] + 2 * c, 2 * n)), acc[i][j]);
      }
    }
  }
}

// fp8_span's sums are 2^-8 times the values (load_fp8_scaled).
template <int R, int T> using Fp8Tile = Fp8BlockTile<Fp8Span, 256.0f, R, T>;
void fp8_tiles(const RowDotParams& p) {
  if (!try_panel(p) && !try_fp8_wide(p)) drive<Fp8Tile>(p);
}
void fp8_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kFp8X16)
    fp8_x16_rows(p);  // the reference, below avx512bf16
  else
    fp8_tiles(p);
}
#endif

}  // namespace

RowDotFn find_float(DType wtype) {
  switch (wtype) {
    case DType::kF32: return f32_rows;
    case DType::kBF16: return bf16_rows;
    case DType::kF8E4M3: return fp8_rows;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
