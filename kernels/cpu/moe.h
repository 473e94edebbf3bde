// The fused routed-expert layer of an expert worker: for a batch of tokens
// and the experts the router chose for each, gate and up projections,
// SiLU(gate) * up, the down projection and the router-weighted sum, on this
// worker's tensor-parallel slice of every expert (gate/up rows and down
// columns [f0, f0 + ffn) of the full F; the slices of all workers add up to
// the layer's output).
//
// Work distribution (one call = one layer, ThreadPool::run_shared: every
// step takes its work from a counter, so the calling thread starts at once
// and a pool thread that wakes late joins in; no step waits for all threads):
//  1. the tokens' activations are converted once, a token at a time, while
//     thread 0 groups the assignments by expert and writes the task list
//     (so a pool thread's wake-up and the conversion overlap the routing);
//  2. tasks are handed out from one atomic counter in the order
//     A(e0) A(e1) B(e0) A(e2) B(e1) ... B(last), where A(e) is a chunk of
//     expert e's gate/up rows for all its tokens (ending with SiLU*up and the
//     conversion of that chunk into the down projection's activation format)
//     and B(e) a chunk of its down rows; a B task waits only for its own
//     expert's A tasks (a per-expert counter), never for a global barrier;
//  3. pieces of the output columns are summed over the tokens' experts in
//     routing order (deterministic whatever the thread timing), each once
//     the B tasks that write its columns are done, so a thread out of tasks
//     sums while the others finish theirs.
// The caller provides the workspace (moe_workspace_bytes) and the thread
// pool; nothing is allocated per call. The workspace also keeps the layouts
// of the last few calls' shapes and batch sizes, which the next calls reuse.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_ops.h"

namespace tandem::kernels {

struct MoeShape {
  DType gate_up_type = DType::kF32;  // gate and up share a type
  DType down_type = DType::kF32;     // down may differ (Q4_K_M files use Q6_K)
  int64_t hidden = 0;                // H: gate/up columns, down rows
  int64_t ffn = 0;                   // this worker's F slice: gate/up rows, down columns
  int64_t n_experts = 0;
  size_t gate_up_row_stride = 0;  // bytes between gate (and up) rows
  size_t down_row_stride = 0;     // bytes between down rows
  size_t gate_up_scale_stride = 0, down_scale_stride = 0;  // FP8: floats between scale rows
  // How the arena stores them (weight_layout.h); the repacked layouts need
  // contiguous rows (strides of one row) and row counts in whole groups.
  WeightLayout gate_up_layout = WeightLayout::kRowMajor, down_layout = WeightLayout::kRowMajor;
  // Activations of f32 precision for the projections whose weights take bf16
  // ones (BF16, F8_E4M3): each token's row goes in as two bf16 rows, hi and
  // lo (convert_row_dot_activations_split), and the two dots are added.
  // Twice the multiplies on the same weight bytes; for Hugging Face models,
  // whose reference computes in f32. No effect on other weight types.
  bool split_bf16_activations = false;

  bool operator==(const MoeShape&) const = default;
};

// One expert's slice. FP8 weights carry their 128x128 block scales, laid out
// for the slice (row r of the slice uses scale row r / 128), and may carry
// their marks (fp8_marks.h, made from the slice's bytes), which speed up
// the rows of one or two tokens.
struct MoeExpert {
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
  const float* gate_scales = nullptr;
  const float* up_scales = nullptr;
  const float* down_scales = nullptr;
  const uint8_t* gate_marks = nullptr;
  const uint8_t* up_marks = nullptr;
  const uint8_t* down_marks = nullptr;
};

struct MoeBatch {
  int64_t n_tokens = 0;
  int top_k = 0;
  const float* x = nullptr;  // n_tokens x hidden
  size_t x_row_stride = 0;   // floats
  const int32_t* expert_ids = nullptr;     // n_tokens x top_k; -1: no expert in this slot
  const float* expert_weights = nullptr;   // n_tokens x top_k
  float* y = nullptr;  // n_tokens x hidden, overwritten
  size_t y_row_stride = 0;
};

// The kernels for a shape at an instruction-set level, chosen once.
struct MoeKernels {
  RowDotFn gate_up = nullptr, down = nullptr;
  CpuIsa gate_up_level = CpuIsa::kGeneric, down_level = CpuIsa::kGeneric;
  CpuIsa isa = CpuIsa::kGeneric;  // SwiGLU and activation conversion
  VecOps ops{};
};
MoeKernels moe_kernels(CpuIsa isa, const MoeShape& shape);

// Throws kInvalidInput for a shape the kernels cannot take (ffn not whole
// blocks of the down type, hidden not whole blocks of the gate/up type).
void moe_check_shape(const MoeShape& shape);

// Workspace for up to max_tokens tokens of top_k experts each.
size_t moe_workspace_bytes(const MoeShape& shape, int64_t max_tokens, int top_k);

// Runs the layer. Throws before any work: kInvalidInput for an expert id out
// of [-1, n_experts) or a non-finite routing weight; kInternal for a too
// small workspace or missing pointers.
void moe_forward(const MoeKernels& kernels, ThreadPool& pool, const MoeShape& shape,
                 const MoeExpert* experts, const MoeBatch& batch, void* workspace,
                 size_t workspace_bytes);

// Statistics of the last call's routing, for benchmarks: the experts used
// and the weight bytes they span on this worker.
struct MoeRouteStats {
  int64_t active_experts = 0;
  int64_t assignments = 0;
  double weight_bytes = 0;
};
MoeRouteStats moe_route_stats(const MoeShape& shape, const MoeBatch& batch);

}  // namespace tandem::kernels
