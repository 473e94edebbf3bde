// How a weight matrix's bytes are arranged for the CPU kernels. The arena
// stores every tensor in the layout its kernels read fastest and names it in
// the manifest; "rowmajor" is the source format's own rows.
//
// "q4_k_x4" (Q4_K, rows a multiple of 4): every 4 rows form a group, and a
// group's super-block b (576 bytes, the 4 rows' blocks b) is stored as
//   meta[64]: row r at 16r: its 12 scale bytes, d, dmin (fp16);
//   qs[512]:  byte 64s + 16r + 4c + k = row r's qs[32c + 4s + k]
//             (s = 0..7, c = 0..3 the 64-value chunk, k = 0..3),
// so one 64-byte load gives each row's 4 bytes of every chunk at step s, one
// 128-bit lane per row. A group is 4 row lengths, so rows 4g..4g+3 keep
// their byte range: row slices at multiples of 4 stay valid. The kernels
// read it with activations whose Q8_K blocks are permuted to match
// (q4_k_x4_permute_activations): qs'[32s + 16h + 4c + k] = qs[64c + 32h + 4s + k],
// where h = 0 is the low nibbles' sub-block 2c and h = 1 the high ones' 2c+1.
// Same bytes, same integer sums: results are bit-identical to rowmajor.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/dtype.h"
#include "kernels/cpu/cpu_isa.h"

namespace tandem::kernels {

enum class WeightLayout : uint8_t { kRowMajor, kQ4KX4 };

std::string_view layout_name(WeightLayout l);
std::optional<WeightLayout> layout_from_name(std::string_view name);

// Whether routed Q4_K experts should be stored as q4_k_x4 for kernels of
// level `isa`: from avx512 up, whose kernel reads it about twice as fast as
// rowmajor; below, the layout would go through the generic kernel.
inline bool q4_k_x4_pays_off(CpuIsa isa) { return isa >= CpuIsa::kAvx512; }

// Whether `l` can hold a rows x cols matrix of `type` (rowmajor: always).
bool layout_fits(WeightLayout l, DType type, int64_t rows, int64_t cols);

// Rewrites `rows` contiguous row-major rows of `type` into layout `l`, in
// place. Throws kInvalidInput when the layout does not fit.
void repack_rows(WeightLayout l, DType type, uint8_t* w, int64_t rows, int64_t cols);

inline constexpr int kQ4KX4Rows = 4;
inline constexpr size_t kQ4KX4GroupBlock = 4 * 144;  // one super-block of a group

// q4_k_x4 helpers (the kernels' and the reference's): one group's super-block
// to and from 4 plain BlockQ4_K (576 bytes each way).
void q4_k_x4_pack_block(const uint8_t* rows4[4], uint8_t* group_block);
void q4_k_x4_unpack_block(const uint8_t* group_block, uint8_t* rows4[4]);
// The Q8_K blocks of one activation row (cols values), permuted in place for
// q4_k_x4, and back.
void q4_k_x4_permute_activations(uint8_t* q8_k, int64_t cols);
void q4_k_x4_unpermute_activations(uint8_t* q8_k, int64_t cols);

}  // namespace tandem::kernels
