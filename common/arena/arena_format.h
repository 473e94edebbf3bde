// The weight arena's file format. One file, shared read-only by every process
// of a run:
//
//   [0, 4096)                 ArenaHeader (this struct, then zeros)
//   [data_offset, ...)        tensors: dense ones first, then one region per
//                             expert worker holding its slices of every routed
//                             expert (each region aligned, mbind'ed to the
//                             worker's NUMA node)
//   [manifest_offset, +bytes) the Cap'n Proto manifest (proto/manifest.capnp),
//                             a flat message, 8-byte aligned
//
// The builder writes a temporary file and renames it into place only when it
// is complete, so a reader never sees a half-built arena; `state` guards
// against a file copied or truncated by other means.
#pragma once

#include <cstdint>

namespace tandem::arena {

inline constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'A', 'R', 'N', 'A'};
inline constexpr uint32_t kFormatVersion = 1;
// Bumped whenever the kernels want another stored layout: an arena built for
// older kernels no longer matches and is rebuilt.
// 2: q4_k_x4 and q8_0_x4; 3: bf16_x16; 4: q8_0_x4 w + 128; 5: q4_k_x4's meta
// in two words per row (weight_layout.h); 6: routed FP8 experts as F8_E4M3
// with .scale and .marks placements (arena_plan.h); 7: FP8 gate and up
// slices of 5120 columns or more as fp8_s16, its bytes paired
// (weight_layout.h); 8: routed FP8 slices of whole scale blocks as fp8_x16,
// and Q8_0 slices as q8_0_x16 for avx512bf16 (weight_layout.h); 9: BF16
// slices as bf16_x16z for avx512bf16, each expert's matrix coded alone
// (bf16_x16 where a tensor's values do not code); 10: Q5_K and Q6_K
// slices as q5_k_x4 and q6_k_x4 from avx512 up; 11: those from avx2 up (the
// same bytes a layout name holds; an avx2 arena of version 10 keeps Q5_K and
// Q6_K rows); 12: bf16_x16z's first 17 exceptions of a unit in its core's
// header (bf16_x16z.h). Arena::open refuses another.
inline constexpr uint32_t kLayoutVersion = 12;
inline constexpr uint64_t kHeaderBytes = 4096;

enum class ArenaState : uint32_t { kBuilding = 1, kReady = 2 };

struct ArenaHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t state;            // ArenaState; written last, with release order
  uint64_t model_hash;       // identity of the source files (names, sizes, mtimes)
  uint64_t plan_hash;        // worker nodes, alignment, layout version
  uint64_t file_bytes;       // the whole file
  uint64_t data_offset;
  uint64_t manifest_offset;
  uint64_t manifest_bytes;
  int32_t builder_pid;
  uint32_t numa_bound;       // 1: worker regions were mbind'ed to their nodes
  uint64_t builder_start_ticks;
  uint64_t build_unix_ns;    // when the build finished
};
static_assert(sizeof(ArenaHeader) <= kHeaderBytes);

}  // namespace tandem::arena
