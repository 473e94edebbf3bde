// "bf16_x16z": BF16 stored as bf16_x16 (weight_layout.h) with each value's
// high byte (sign and the exponent's top 7 bits) coded in 4 bits, losslessly:
// 12 bits a value where bf16_x16 reads 16, so a matrix's bytes come from DRAM
// in about 0.77 of the time (a layer of bf16_x16 reads at the DRAM's rate:
// decode and prefill are bound by the bytes).
//
// Why it codes: trained weights are near-Gaussian, so in 16 rows by 128
// columns almost every value's exponent lies within 16 binades below the
// largest; one base per unit (the top 7 exponent bits of the window's
// bottom) and a 3-bit offset reach them, the sign takes the fourth bit, and
// the low byte (the exponent's last bit and the 7 mantissa bits) is kept as
// it is. Values outside the window (about one in 8000 in Gaussian weights:
// the tiny ones) are exceptions, kept whole in the unit's spare bytes.
//
// A unit is a group's (16 rows') 128 columns: in bf16_x16 four group blocks,
// 64 vectors of 64 bytes, vector v = 16b + k holding pair k of block b, which
// meets the activations' column pair 64u + v of unit u. A matrix of G row
// groups by U units keeps bf16_x16's G * U * 4096 bytes (the same size), as
// its G * U cores of 3136 bytes side by side (group by group, so a range of
// groups is one stream), then their spares of 960. Reading 3136 of every
// 4096 bytes, or 175 of every 229 KiB, took one thread 1.02-1.27 times as
// long as reading them all on a Zen 5 EPYC (the hardware prefetchers read the
// gaps too); only a contiguous 77% took 0.69-0.76 of the time. Row ranges
// of whole groups stay valid, but the matrix's rows are needed to find the
// spares: a matrix is coded as one (per expert).
// A core is
//   header    64 bytes: u64 mask (bit v: vector v holds an exception), u8
//             base, u8 0, u16 the exception count, then the unit's first
//             17 exceptions (bytes 12-62) and a 0;
//   chunks    16 of 192 bytes from 64, chunk j holding vector pairs 2j and
//             2j + 1 (pair i: vectors 2i and 2i + 1):
//     lo      pair i's 64 low bytes at bf16_x16z_lo(i), the low byte of
//             word w of vector 2i + p in byte 16(w / 8) + 8p + w % 8;
//     codes   pair i's 64 codes in the 32 bytes at bf16_x16z_codes(i), byte
//             m holding byte m's code of the pair's lo bytes in its low
//             nibble and byte m + 32's in its high one; code = sign << 3 |
//             (e7 - base) with e7 the high byte's low 7 bits.
// An exception is 3 bytes: u16 position 32v + w and the high byte. A spare
// holds the unit's exceptions after the header's 17, zeros after them: a
// Gaussian unit has 0.26 on average, so its spare is almost never read.
// Since layout version 12; before it every exception was in the spare, and
// a quarter of the units read a line outside the stream of cores (one
// token from DRAM, two threads at reads of 43-57 GB/s: 0.85-0.90 of a
// plain read where exception-free weights took 0.87-0.95).
// Read: one 64-byte load of lo, a broadcast of the 32 code bytes, a shift
// of their upper half by 4 bits, one vpermb through a table of the base's
// 16 high bytes, and vpunpcklbw / vpunpckhbw of lo with the high bytes give
// vectors 2i and 2i + 1 exactly as bf16_x16 stores them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::kernels {

inline constexpr int64_t kBf16X16ZCols = 128;  // columns of a unit
inline constexpr size_t kBf16X16ZUnit = 4096;  // a unit's bytes (16 rows x 128 columns)
inline constexpr size_t kBf16X16ZCore = 3136;  // of which its core (the bytes a kernel reads)
inline constexpr size_t kBf16X16ZSpare = kBf16X16ZUnit - kBf16X16ZCore;  // and its spare
inline constexpr int kBf16X16ZInline = 17;  // exceptions in the header (bytes 12-62)
inline constexpr int kBf16X16ZMaxExceptions = kBf16X16ZInline + int(kBf16X16ZSpare / 3);  // 337

// Where unit u of row group g of a matrix of `groups` row groups by `units`
// units keeps its core and its spare, from the matrix's start.
constexpr size_t bf16_x16z_core_at(int64_t units, int64_t g, int64_t u) {
  return kBf16X16ZCore * size_t(g * units + u);
}
constexpr size_t bf16_x16z_spare_at(int64_t groups, int64_t units, int64_t g, int64_t u) {
  return kBf16X16ZCore * size_t(groups * units) + kBf16X16ZSpare * size_t(g * units + u);
}

// A unit's exception count (its header's u16 at byte 10).
inline int bf16_x16z_count(const uint8_t* core) { return core[10] | core[11] << 8; }

// Exception k (0 .. the count - 1) of a unit: in its header or its spare.
inline const uint8_t* bf16_x16z_exception(const uint8_t* core, const uint8_t* spare, int k) {
  return k < kBf16X16ZInline ? core + 12 + 3 * size_t(k) : spare + 3 * size_t(k - kBf16X16ZInline);
}
// The same place, to write (the coder).
inline uint8_t* bf16_x16z_exception(uint8_t* core, uint8_t* spare, int k) {
  return const_cast<uint8_t*>(bf16_x16z_exception(static_cast<const uint8_t*>(core), spare, k));
}

// Where vector pair i's (0..31) lo bytes and codes sit in a core.
constexpr size_t bf16_x16z_lo(int64_t i) { return 64 + 192 * size_t(i / 2) + 64 * size_t(i % 2); }
constexpr size_t bf16_x16z_codes(int64_t i) { return 64 + 192 * size_t(i / 2) + 128 + 32 * size_t(i % 2); }
// Where the low byte of word w (0..31) of vector 2i + p (p = 0, 1) sits in
// pair i's 64 lo bytes.
constexpr int bf16_x16z_slot(int p, int w) { return 16 * (w / 8) + 8 * p + w % 8; }

// The window for a unit whose high bytes' low 7 bits have the histogram
// `count`: sets *base to the bottom of the 8 values that hold the most and
// returns how many lie outside (the exceptions).
int bf16_x16z_window(const int (&count)[128], int* base);

// Codes one unit (`x16`: 4096 bytes as bf16_x16 stores them) into its core
// and spare. False, with them undefined, when more than
// kBf16X16ZMaxExceptions values lie outside every window (not trained
// weights: random bits, say).
bool bf16_x16z_code(const uint8_t* x16, uint8_t* core, uint8_t* spare);
// The unit back as bf16_x16's 4096 bytes.
void bf16_x16z_decode(const uint8_t* core, const uint8_t* spare, uint8_t* x16);

}  // namespace tandem::kernels
