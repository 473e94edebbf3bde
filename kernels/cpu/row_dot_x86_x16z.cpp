// BF16 weights stored as bf16_x16z (bf16_x16z.h): bf16_x16's outer products
// on vectors decoded in registers from 12 bits a value, so a layer reads
// 0.77 of bf16_x16's bytes from DRAM.
//
// Decoding a pair of vectors (2i, 2i + 1: 32 rows' worth of column pairs)
// takes a load of 64 low bytes, a broadcast of 32 code bytes, a shift, a
// vpermb through the unit's table of high bytes and two unpacks: four
// instructions besides the loads where bf16_x16 loads two vectors. A
// vector with an exception (about one in 200 of Gaussian weights) is
// patched from the unit's list, in registers.
//
// One token keeps bf16_x16's decode order, ggml_vec_dot_bf16's bit for bit
// (row_dot_x86_x16.cpp): sum k of 32 adds vector k of every 64 columns, in
// order. Several tokens take tiles of three groups by up to 8 tokens (24
// sums; the decoding needs the registers bf16_x16's ninth token takes), each
// unit's vectors decoded once per tile and used by every token; tokens that
// take several passes go in steps of 8 units (1024 columns) so the later
// passes find the step in L2. Both prefetch ahead in the cores' stream
// where asks_for_stream says (row_dot.h: not up to 4 tokens on a Zen 4).
//
// What it gives (docs/cpu-kernels.md, stop 50): in the layer 1.1-1.5 times
// bf16_x16's values per second from batch 1 to 32 at the same reads, the
// same at DeepSeek-V3's 256 tokens, 0.85-0.95 at Qwen3-30B-A3B's (16 tokens
// an expert: the tiles' decoding takes issue slots the tokens need). The
// loader stores BF16 this way for this level.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/bf16_x16z.h"
#include "kernels/cpu/row_dot_x86_tile.h"
#include "kernels/cpu/row_dot_x86_x16.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

#if defined(__AVX512BF16__)
namespace {

using x16::pair_of;

constexpr size_t kCore = kBf16X16ZCore;
constexpr int64_t kUnitPairs = kBf16X16ZCols / 2;  // column pairs of a unit: one vector each

// A unit (bf16_x16z.h): its core, and its spare with the exceptions, after
// every core of the matrix.
struct Unit {
  const uint8_t* core;
  const uint8_t* spare;
};
// The call's matrix: unit u of the group at row r is at ... + (r / 16 * units + u).
struct Coded {
  const uint8_t* cores;
  const uint8_t* spares;
  int64_t units;
  explicit Coded(const RowDotParams& p)
      : cores(p.w),
        spares(p.w + bf16_x16z_spare_at(p.rows / kX16Rows, p.cols / kBf16X16ZCols, 0, 0)),
        units(p.cols / kBf16X16ZCols) {}
  Unit at(int64_t row, int64_t u) const {
    const size_t n = size_t(row / kX16Rows * units + u);
    return {cores + kCore * n, spares + kBf16X16ZSpare * n};
  }
};

// A unit's table of high bytes by code (sign << 3 | offset), 16 bytes
// repeated: vpermb reads 6 index bits and a code fills the low 4.
inline __m512i unit_table(const uint8_t* core) {
  const __m512i codes = _mm512_set4_epi32(int32_t(0x87868584u), int32_t(0x83828180u), 0x07060504, 0x03020100);
  return _mm512_add_epi8(codes, _mm512_set1_epi8(char(core[8])));
}
inline uint64_t unit_mask(const uint8_t* core) { return load_unaligned<uint64_t>(core); }
// Shifts the upper half's code bytes down by a nibble (per 16-bit word: the
// byte above brings its low nibble into bits 4..7, which vpermb ignores).
inline __m512i code_shift() {
  return _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0, 0, 0,
                          0);
}

// Vector pair i of a unit patched from its exceptions (bf16_x16z.h: in its
// header, after 17 in its spare): about one pair in 100 in Gaussian weights.
// In registers, with no call: a call would clobber every vector register,
// and the compiler then keeps the sums in memory throughout (a store of each
// decoded vector and a third of the sums on the stack: one token at 0.7 of
// bf16_x16's speed).
inline void patch_pair(const Unit& un, int64_t i, __m512bh& v0, __m512bh& v1) {
  const int n = std::min(bf16_x16z_count(un.core), kBf16X16ZMaxExceptions);  // a damaged count: no further
  for (int k = 0; k < n; ++k) {
    const uint8_t* x = bf16_x16z_exception(un.core, un.spare, k);
    const int pos = x[0] | x[1] << 8, v = pos / 32;
    if (v / 2 != i) continue;
    const __mmask64 byte = __mmask64(1) << (2 * (pos % 32) + 1);
    const __m512i hi = _mm512_set1_epi8(char(x[2]));
    if (v % 2)
      v1 = (__m512bh)_mm512_mask_mov_epi8((__m512i)v1, byte, hi);
    else
      v0 = (__m512bh)_mm512_mask_mov_epi8((__m512i)v0, byte, hi);
  }
}

// Vectors 2i and 2i + 1 of a unit, as bf16_x16 stores them.
inline void decode_pair(const Unit& un, int64_t i, __m512i table, __m512i shift, uint64_t mask, __m512bh& v0,
                        __m512bh& v1) {
  const __m512i lo = _mm512_loadu_si512(un.core + bf16_x16z_lo(i));
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(un.core + bf16_x16z_codes(i)));
  const __m512i hi = _mm512_permutexvar_epi8(_mm512_srlv_epi16(_mm512_broadcast_i64x4(c), shift), table);
  v0 = (__m512bh)_mm512_unpacklo_epi8(lo, hi);
  v1 = (__m512bh)_mm512_unpackhi_epi8(lo, hi);
  if (__builtin_expect((mask >> (2 * i)) & 3, 0)) patch_pair(un, i, v0, v1);
}

// Prefetches of the three lines `ahead` bytes past chunk j of a core (the
// cores are one stream: they reach into the next units' cores).
template <_mm_hint Hint>
inline void fetch_chunk(const uint8_t* core, int64_t j, size_t ahead) {
  const uint8_t* p = core + 64 + 192 * size_t(j) + ahead;
  _mm_prefetch(reinterpret_cast<const char*>(p), Hint);
  _mm_prefetch(reinterpret_cast<const char*>(p + 64), Hint);
  _mm_prefetch(reinterpret_cast<const char*>(p + 128), Hint);
}
constexpr size_t kStreamAhead = 3072;
// The first pass of a step of several (9 tokens or more) on a CPU whose
// prefetch profile is `hardware` (a Zen 4) asks half as far ahead. Stop 63,
// that Zen 4, two threads over 16 coded 2048 x 7168 or 200 coded 768 x 2048
// matrices from DRAM (reads of 30-35 GB/s), of a plain read alternated in
// rounds: 10 tokens 0.72-0.79 -> 0.76-0.85, 12 0.66-0.71 -> 0.73-0.77, 16
// 0.53-0.56 -> 0.55-0.60; 768, 1024 and 2048 bytes as 1536, 6144 nearly so
// (12 tokens at reads of 46-51: 0.49-0.55 where 3072 took 0.45-0.50). One
// pass (up to 8 tokens) stays at 3072, the best there (4 tokens 0.93-0.97
// against 0.82-0.95, 8 tokens 0.85-0.95 against 0.81-0.94). The layer, the
// two alternated by repetition in one process (five runs, reads of 32-59):
// DeepSeek-V3 at 16, 32 and 256 tokens 1.00-1.04x, 1.00-1.05x and
// 1.03-1.07x (65-71 -> 68-75% of the peak), Qwen3-30B-A3B 1.01-1.06x,
// 1.01-1.05x and 1.04-1.06x. Zen 5 and other CPUs keep 3072: unmeasured.
constexpr size_t kStepStreamAhead = 1536;
// One token prefetches two cores ahead. One thread over a 16384 x 7168
// matrix from DRAM, values per second against bf16_x16's in the same
// process, three rounds: hardware prefetches alone 0.72-0.79, two cores
// ahead 0.84-1.04.
constexpr size_t kDecodeAhead = 2 * kCore;
// And every line again three cores ahead. One token's decoding takes about
// ten instructions a line, so the out-of-order window holds few of the
// stream's loads, and the hardware prefetchers do little for it (with no
// prefetch of ours 17-20 GB/s where a plain read takes 35-40; prefetching
// one or two of each chunk's three lines 19 and 26): the prefetches are what
// keeps DRAM busy. A second, farther request for each line keeps more of
// them in flight. Stop 52, one thread, 100 coded matrices from DRAM, coded
// GB/s over a plain read of them alternated in 10-12 rounds (medians):
// gates (768 x 2048) 0.808-0.810 -> 0.864-0.867, downs (2048 x 768) 0.832
// -> 0.854; hot in L3 the same (0.79); other distances no better (2 and 3
// cores 0.862-0.863, 2 and 6 0.848-0.862; 3 or 4 alone, 1 and 3: none
// above 2 alone). The tiles of several tokens read three streams and lost
// by it (4 tokens: 0.909 -> 0.835-0.850 with a second request 6-9 KiB on).
// Stop 59 moved it from four cores to three: in the benchmark's whole layer
// (batch 1, two threads, both cores reading) the variants alternated by
// repetition, two rounds of 140 and 200 each, medians of coded GB/s over the
// same run's plain read: at quiet reads (>= 65 GB/s) 2+4 cores 0.856/0.848
// (DeepSeek-V3) and 0.841/0.825 (Qwen3), 2+3 0.860/0.867 and 0.856/0.870;
// 2+3 was at or above 2+4 in every read band of both rounds (+0.3 to +4.5%);
// 2 alone 0.870/0.839, 3 alone 0.867 then 0.847, the far one as T2 0.797.
constexpr size_t kDecodeFar = 3 * kCore;

// A unit's exceptions after the header's 17 sit in its spare, after all the
// matrix's cores; the patch's load of the spare, outside the stream, missed
// the caches and stalled the loop. So a unit asks for the next unit's spare
// line when that unit's count (in its header) says it will need it, once
// the stream has brought that header: at the unit's end (a load of a header
// further on waits for DRAM: the tiles since stop 64, one token since 66).
// Before layout version 12 every exception sat there (a quarter of Gaussian
// units had one), and this was measured then: one
// thread, 200 Qwen3-30B-A3B gates (768 x 2048) from DRAM, coded GB/s against
// a plain read of the cores: one token 24.4 -> 28.4 of 30.5 (downs, 2048 x
// 768: 23.7 -> 27.1 of 28.5); DeepSeek-V3's gate (2048 x 7168) at 8 tokens
// 19.8 -> 24.7-27.8 of 29.2; exception-free weights 29-31 either way. Two
// units ahead, from a header not yet in the caches: 22.4 at 8 tokens. Always
// inlined: GCC 12 takes a function whose only effect is a prefetch for one
// without effects and drops the call.
[[gnu::always_inline]] inline void fetch_next_spare(const Unit& un) {
  if (bf16_x16z_count(un.core + kCore) > kBf16X16ZInline)
    _mm_prefetch(reinterpret_cast<const char*>(un.spare + kBf16X16ZSpare), _MM_HINT_T0);
}

// ---- one token --------------------------------------------------------------------
// One group (16 rows from row0), unit after unit: sum k adds vector k of
// each 64 columns (vectors k and 32 + k of a unit), in order: ggml's floats.
// kAsk: the stream's prefetches above (CpuPrefetch::kSoftware); without
// them the CPU's prefetchers read it (a Zen 4's; cpu_isa.h).
template <bool kAsk>
void decode_group(const RowDotParams& p, const Coded& m, int64_t row0, const uint8_t* a) {
  __m512 s[32];
#pragma GCC unroll 32
  for (int k = 0; k < 32; ++k) s[k] = _mm512_setzero_ps();
  const __m512i shift = code_shift();
  for (int64_t u = 0; u < m.units; ++u) {
    const Unit un = m.at(row0, u);
    const __m512i table = unit_table(un.core);
    const uint64_t mask = unit_mask(un.core);
    const uint8_t* au = a + 4 * size_t(kUnitPairs * u);
    // The chunks' prefetches leave out the header lines two and three units on.
    if constexpr (kAsk) {
      _mm_prefetch(reinterpret_cast<const char*>(un.core + kDecodeAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(un.core + kDecodeFar), _MM_HINT_T0);
    }
#pragma GCC unroll 32
    for (int i = 0; i < 32; ++i) {
      if (kAsk && i % 2 == 0) {
        fetch_chunk<_MM_HINT_T0>(un.core, i / 2, kDecodeAhead);
        fetch_chunk<_MM_HINT_T0>(un.core, i / 2, kDecodeFar);
      }
      __m512bh v0, v1;
      decode_pair(un, i, table, shift, mask, v0, v1);
      s[(2 * i) % 32] = _mm512_dpbf16_ps(s[(2 * i) % 32], v0, pair_of(au, 2 * i));
      s[(2 * i + 1) % 32] = _mm512_dpbf16_ps(s[(2 * i + 1) % 32], v1, pair_of(au, 2 * i + 1));
    }
    // The next unit's spare, asked for at the unit's end, where its header is
    // the stream's next line. Until stop 66 this read that header before the
    // unit's chunk 0, a core ahead of the loop: on a Zen 4, whose prefetchers
    // read one token's stream (asks_for_stream), a load that often waited
    // for DRAM at the head of the window once a unit. The layer at batch 1,
    // the two alternated by repetition in one process, both orders, reads of
    // 54-61 GB/s: DeepSeek-V3 0.89-0.94x the time (82.6-86.3% -> 90.1-94.6%
    // of the read), Qwen3-30B-A3B 0.91-0.97x (87.3-92.3% -> 93.3-97.6%);
    // batches 2 and 8 (mostly one token an expert) 0.91-0.98x.
    fetch_next_spare(un);
  }
  x16::store_vec_dot(p.y + row0, x16::reduce16_lanes(s), x16::reduce16_lanes(s + 16));
}

void decode_rows(const RowDotParams& p) {
  const uint8_t* a = activation_row(p, 0);
  const Coded m(p);
  const bool ask = asks_for_stream(p, kX16HardwareStreamTokens);
  for (int64_t r = p.row_begin; r < p.row_end; r += kX16Rows)
    ask ? decode_group<true>(p, m, r, a) : decode_group<false>(p, m, r, a);
}

// ---- several tokens ------------------------------------------------------------------
constexpr int kMaxTokens = 8;
constexpr int64_t kUnitsPerStep = 8;  // 1024 columns

// A tile's groups: G from row r0, gstep groups apart (far-apart groups: the
// prefill's thirds), their outputs y_group floats apart.
struct ZTile {
  const Coded& m;
  int64_t r0, gstep;
  size_t y_group;
};

// G groups by NT tokens over units [u0, u1): y[t] += (or = when first) the
// partial dots. kStreams: the pass that streams the step in, prefetching
// ahead in it; and when shares > 0, the pass asks for chunk j of the next
// step's units where j % shares == share (each pass of a step of several
// tokens takes its share). A few tokens split each sum over two chains
// (vectors 2i and 2i + 1), so enough independent sums hide vdpbf16ps's
// latency.
template <int G, int NT, bool kStreams>
void z_tile(const ZTile& tg, int64_t u0, int64_t u1, const uint8_t* const* a, float* const* y, bool first,
            int share, int shares, size_t ahead) {
  constexpr int C = NT <= 4 ? 2 : 1;
  __m512 acc[C][NT][G];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 3
    for (int g = 0; g < G; ++g) {
      acc[0][t][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y[t] + tg.y_group * g);
      if constexpr (C == 2) acc[1][t][g] = _mm512_setzero_ps();
    }
  const __m512i shift = code_shift();
  for (int64_t u = u0; u < u1; ++u) {
    Unit z[G];
    __m512i table[G];
    uint64_t mask[G];
#pragma GCC unroll 3
    for (int g = 0; g < G; ++g) {
      z[g] = tg.m.at(tg.r0 + kX16Rows * tg.gstep * g, u);
      table[g] = unit_table(z[g].core);
      mask[g] = unit_mask(z[g].core);
    }
    const int64_t k0 = kUnitPairs * u;
    for (int j = 0; j < 16; ++j) {
#pragma GCC unroll 3
      for (int g = 0; g < G; ++g) {
        if (kStreams && ahead > 0) fetch_chunk<_MM_HINT_T0>(z[g].core, j, ahead);
        if (shares > 0 && j % shares == share) fetch_chunk<_MM_HINT_T2>(z[g].core, j, kUnitsPerStep * kCore);
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int i = 2 * j + h;
        __m512bh v0[G], v1[G];
#pragma GCC unroll 3
        for (int g = 0; g < G; ++g) decode_pair(z[g], i, table[g], shift, mask[g], v0[g], v1[g]);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m512bh x = pair_of(a[t], k0 + 2 * i);
#pragma GCC unroll 3
          for (int g = 0; g < G; ++g) acc[0][t][g] = _mm512_dpbf16_ps(acc[0][t][g], v0[g], x);
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m512bh x = pair_of(a[t], k0 + 2 * i + 1);
#pragma GCC unroll 3
          for (int g = 0; g < G; ++g) acc[C - 1][t][g] = _mm512_dpbf16_ps(acc[C - 1][t][g], v1[g], x);
        }
      }
    }
    // The next unit's spare, asked for at the unit's end, when the stream
    // has brought the next header (chunk 0's prefetches reach it, `ahead`
    // being less than a core, or the CPU's where the tile asks for none:
    // asks_for_stream). Until stop 64 this read the header before chunk 0:
    // a load from DRAM each unit, which held up the unit's start. Two threads
    // over 200 coded 2048 x 768 or 768 x 2048 matrices from DRAM (reads of
    // 29-35 GB/s), of a plain read, the two alternated in rounds in both
    // orders: 16 tokens (a step of two passes, bound by the arithmetic)
    // 0.53-0.55 -> 0.59-0.64, 9-17% faster; 2 to 8 tokens (one pass) no
    // change that held in both orders (1-5% more run second, mixed run
    // first). The layer, alternated by repetition in one process, six runs
    // in both orders: at 256 tokens Qwen3-30B-A3B 3-6.5% faster,
    // DeepSeek-V3 1-4.5%; at 32 tokens 0-6.5%, within the noise. The spare of
    // a unit of more than 17 exceptions (none in Gaussian or Student-t
    // weights) is asked for a unit's work later, just before its decoding.
    if constexpr (kStreams)
#pragma GCC unroll 3
      for (int g = 0; g < G; ++g) fetch_next_spare(z[g]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 3
    for (int g = 0; g < G; ++g) {
      __m512 v = acc[0][t][g];
      if constexpr (C == 2) v = _mm512_add_ps(v, acc[1][t][g]);
      _mm512_storeu_ps(y[t] + tg.y_group * g, v);
    }
}

// One step: G groups (the first at row r0, the others gstep groups apart),
// units [u0, u1).
struct Step {
  int64_t r0, u0, u1, gstep;
};

// The next step's lines are asked for in equal shares by every pass of
// this one, so DRAM works through the whole step: asked for by the second
// pass alone (stops 40-55), they came at twice the rate DRAM gives while
// it computed and not at all while the other passes did. One program over
// 384 x 2048 and 384 x 7168 coded matrices from DRAM, two threads, of a
// plain read (stop 56, medians of 6-8 alternated rounds): 10 tokens 0.768
// -> 0.800, 12 0.730 -> 0.781, 0.792 -> 0.853 and 0.828 -> 0.877 (7168
// columns), 20 (three passes) 0.603 -> 0.719, 16 0.729 -> 0.775 and 0.748
// -> 0.750 (where the arithmetic bounds it 0.511 -> 0.504); a third in the
// first pass 0.756 -> 0.769, all in the first 0.579 -> 0.526. The layer at
// 256 tokens (alternated by repetition, reads of 37-71 GB/s): Qwen3-30B-
// A3B 3.2-4.1% faster in three runs, DeepSeek-V3 -5% to +3% (0.8-4.5%
// faster per byte of its plain reads).
template <int G, int NT>
void z_tokens(const RowDotParams& p, const Step& st, int64_t t0, int pass, int passes) {
  const uint8_t* a[NT];
  float* y[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    a[t] = activation_row(p, t0 + t);
    y[t] = p.y + size_t(t0 + t) * p.y_row_stride + size_t(st.r0);
  }
  const Coded m(p);
  const ZTile tg{m, st.r0, st.gstep, size_t(kX16Rows * st.gstep)};
  const bool first = st.u0 == 0;
  const int shares = passes > 1 ? passes : 0;  // one pass: the step is the rows' whole width
  // The first pass streams the weights in: `ahead` bytes ahead, or, for the
  // few tokens a Zen 4's prefetchers take better alone (asks_for_stream), 0,
  // no requests (one pass only: more than 4 tokens always ask).
  size_t ahead = kStreamAhead;
  if (!asks_for_stream(p, kX16HardwareStreamTokens))
    ahead = 0;
  else if (passes > 1 && prefetch_profile(p) == CpuPrefetch::kHardware)
    ahead = kStepStreamAhead;
  if (pass == 0)
    z_tile<G, NT, true>(tg, st.u0, st.u1, a, y, first, 0, shares, ahead);
  else
    z_tile<G, NT, false>(tg, st.u0, st.u1, a, y, first, pass, shares, 0);  // streams nothing
}

// The tokens in passes of balanced sizes (9 as 5 + 4, 12 as 6 + 6): a pass
// of one to three tokens pays the decoding for few products and leaves too
// few sums to hide vdpbf16ps's latency. One thread, hot (96 x 2048), GFLOP/s:
// 9 tokens as 8 + 1 360-366, 12 as 8 + 4 436-442, against bf16_x16's 470-484.
template <int G>
void z_step(const RowDotParams& p, const Step& st) {
  const int64_t passes = (p.n_tokens + kMaxTokens - 1) / kMaxTokens;
  int64_t t = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const int64_t n = (p.n_tokens - t) / (passes - pass) + ((p.n_tokens - t) % (passes - pass) != 0);
    with_tokens<kMaxTokens>(n, [&]<int NT>() { z_tokens<G, NT>(p, st, t, pass, int(passes)); });
    t += n;
  }
}

// One pass (up to 8 tokens) over the rows' whole width; several in steps.
template <int G>
void z_rows(const RowDotParams& p, int64_t r0, int64_t gstep) {
  const int64_t nu = p.cols / kBf16X16ZCols, step = p.n_tokens <= kMaxTokens ? nu : kUnitsPerStep;
  for (int64_t u = 0; u < nu; u += step) z_step<G>(p, Step{r0, u, std::min(nu, u + step), gstep});
}

// Tiles of three groups from the range's thirds, then the one or two left
// (as bf16_x16's prefill_rows).
void prefill_rows(const RowDotParams& p) {
  const int64_t groups = (p.row_end - p.row_begin) / kX16Rows, q = groups / kX16TileGroups;
  for (int64_t j = 0; j < q; ++j) z_rows<kX16TileGroups>(p, p.row_begin + j * kX16Rows, q);
  const int64_t r0 = p.row_begin + kX16TileGroups * q * kX16Rows;
  if (groups % kX16TileGroups == 2)
    z_rows<2>(p, r0, 1);
  else if (groups % kX16TileGroups == 1)
    z_rows<1>(p, r0, 1);
}

}  // namespace

void bf16_x16z_rows(const RowDotParams& p) {
  if (p.n_tokens == 1)
    decode_rows(p);
  else
    prefill_rows(p);
}

#else
// No vdpbf16ps at this level: the reference takes the layout.
void bf16_x16z_rows(const RowDotParams& p) { generic::find(DType::kBF16)(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
