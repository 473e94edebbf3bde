// An expert worker's arithmetic: for one MoE layer and a chunk of tokens with
// their chosen experts, this worker's partial sum over its F slice of every
// expert (arena_plan.h: gate/up rows and down columns [f0, f1)). The partial
// sums of all workers add up to the layer's routed-expert output.
//
// Every layer goes through the fused MoE kernel (kernels/cpu/moe.h) at the
// chosen instruction-set level. Hugging Face sources compute with activations
// of f32 precision (their reference computes in f32, as the engine does for
// them, weights.h): F32 weights take f32 ones, BF16 and FP8 weights two bf16
// rows (MoeShape::split_bf16_activations). What the fused kernel cannot take
// (a shape it refuses, HF F16 experts) goes expert by expert through
// engine::Linear, the single-process engine's arithmetic.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/engine/linear.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::arena {
class Arena;
}

namespace tandem::expert {

struct ComputeOptions {
  int worker = 0;
  kernels::CpuIsa isa = kernels::CpuIsa::kGeneric;
  int64_t max_tokens = 1;  // per call
  int top_k = 1;
};

class ExpertCompute {
 public:
  // Finds this worker's slices of every MoE layer in the arena; throws
  // kNotFound when the arena has no slices for the worker.
  ExpertCompute(const arena::Arena& a, const ComputeOptions& o, kernels::ThreadPool& pool);
  ~ExpertCompute();

  int64_t n_layers() const { return int64_t(layers_.size()); }
  int64_t hidden() const { return hidden_; }
  int64_t n_experts() const { return n_experts_; }
  uint64_t ffn_begin() const { return ffn_begin_; }
  uint64_t ffn_end() const { return ffn_end_; }
  bool fused() const { return fused_; }

  // y = this worker's partial routed output. Throws kInvalidInput for a
  // layer without experts, too many tokens or an expert id out of range.
  void run(int64_t layer, int64_t n_tokens, int top_k, const float* x, const int32_t* expert_ids,
           const float* expert_weights, float* y);

 private:
  struct Layer;
  void run_reference(const Layer& L, int64_t n_tokens, int top_k, const float* x,
                     const int32_t* ids, const float* w, float* y);

  kernels::ThreadPool& pool_;
  std::vector<std::unique_ptr<Layer>> layers_;  // null for dense layers
  int64_t hidden_ = 0, n_experts_ = 0, max_tokens_ = 0;
  int top_k_ = 0;
  uint64_t ffn_begin_ = 0, ffn_end_ = 0;
  bool fused_ = true;
  kernels::CpuIsa isa_;
  std::vector<std::byte> workspace_;
  engine::Linear linear_;
  std::vector<float> g_, u_, d_;
};

}  // namespace tandem::expert
