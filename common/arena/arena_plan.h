// Where every tensor goes in the weight arena. A pure function of the model's
// tensor map and the expert workers' NUMA nodes, so it can be tested without
// building anything.
//
// Dense tensors are stored once. Routed experts are split tensor-parallel
// across the expert workers along their intermediate dimension F: worker w
// holds rows [f0, f1) of every expert's gate and up ([E, F, H] -> [E, f1-f0, H])
// and the same columns of down ([E, H, F] -> [E, H, f1-f0]), so each worker
// computes silu(gate) * up for its F range and a partial sum of down that the
// requester adds up. F ranges are whole quantisation blocks of down's type.
//
// Stored types are what the CPU kernels consume: a tensor's own type where
// the map keeps whole source rows (gathers included), F32 where it transposes
// or applies FP8 block scales, and F32 for 1-D tensors (norms, biases) —
// except routed FP8 experts with 128x128 block scales (DeepSeek-V3's
// checkpoints), which stay F8_E4M3 for the fused kernels: each worker's slice
// then has two more placements, "<name>.scale" (F32 [E, row blocks, column
// blocks] of the slice) and "<name>.marks" (U8 [E, rows, fp8_marks_row_bytes],
// kernels/cpu/fp8_marks.h), and F ranges are whole 128-blocks (the last one
// may be partial), so every slice has its own scale blocks.
// Layouts (kernels/cpu/weight_layout.h): "rowmajor", except routed expert
// slices whose type the expert workers' kernel level (repack_for) reads
// faster repacked (kernels::expert_matrix_layout: Q4_K, Q5_K and Q6_K from
// avx2 up, Q8_0 from avx512 up, BF16, FP8 and Q8_0 with avx512bf16), which
// become "q4_k_x4", "q5_k_x4", "q6_k_x4" (avx2 and up), "q8_0_x4" (avx512 and amx) or "q8_0_x16" (avx512bf16),
// "bf16_x16z" or "bf16_x16" and "fp8_x16" wherever their shape allows. FP8's marks are
// made from the rows, before any repack.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/model/tensor_map.h"
#include "kernels/cpu/weight_layout.h"

namespace tandem::arena {

enum class SplitAxis { kNone, kRows, kCols };
// What a placement holds: a tensor's values, or an FP8 expert slice's block
// scales or marks (made from the weights placement of the same worker).
enum class PlacementRole { kValues, kFp8Scales, kFp8Marks };

struct Placement {
  std::string name;
  const MappedTensor* source = nullptr;
  DType dtype = DType::kF32;       // stored type
  std::vector<uint64_t> shape;     // stored shape (a slice's shape for experts)
  uint64_t offset = 0;             // in the file: a multiple of the alignment (of kSmallAlignment for scales, marks)
  uint64_t bytes = 0;
  int worker = -1;                 // -1: dense
  int node = -1;                   // physical NUMA node, -1: not bound
  SplitAxis split = SplitAxis::kNone;
  uint64_t slice_begin = 0, slice_end = 0;  // F range of a split expert tensor
  kernels::WeightLayout layout = kernels::WeightLayout::kRowMajor;
  PlacementRole role = PlacementRole::kValues;
};

// Alignment of an FP8 slice's scales and marks (values: the plan's alignment).
inline constexpr uint64_t kSmallAlignment = 64;

struct Region {
  uint64_t begin = 0, end = 0;     // bytes, aligned
  int node = -1;
};

struct ArenaPlan {
  std::vector<int> worker_nodes;
  uint64_t alignment = 4096;
  std::vector<Placement> placements;
  Region dense;
  std::vector<Region> workers;     // one per worker
  uint64_t data_end = 0;           // manifest starts here
  uint64_t hash = 0;               // of worker nodes, alignment, layouts
  uint64_t tensor_bytes() const;
};

// The stored type of a canonical tensor (see the file comment).
DType stored_dtype(const MappedTensor& t);
// True for a routed-expert tensor that is split across workers.
bool is_routed_expert(const std::string& name);
// True for a routed-expert tensor stored as F8_E4M3 with its block scales
// (every piece FP8 with 128x128 scales, whole untransposed source rows).
bool stores_fp8_experts(const MappedTensor& t);
// "blk.3.ffn_up_exps.weight" -> "blk.3.ffn_up_exps.scale" / ".marks"
std::string fp8_scales_name(const std::string& weight_name);
std::string fp8_marks_name(const std::string& weight_name);
// Their shapes for an FP8 slice of shape [E, rows, cols]: [E, row blocks,
// column blocks] (F32) and [E, rows, fp8_marks_row_bytes(cols)] (U8).
std::vector<uint64_t> fp8_scales_shape(const std::vector<uint64_t>& slice_shape);
std::vector<uint64_t> fp8_marks_shape(const std::vector<uint64_t>& slice_shape);

// worker_nodes: the physical NUMA node of each expert worker (at least one).
// alignment: of every tensor and region (the page or huge page size).
// repack_for: the expert workers' kernel level, whose layouts the routed
// expert slices take (above); generic keeps every slice rowmajor.
ArenaPlan plan_arena(const TensorMap& map, const std::vector<int>& worker_nodes,
                     uint64_t alignment, kernels::CpuIsa repack_for = kernels::CpuIsa::kGeneric);

}  // namespace tandem::arena
