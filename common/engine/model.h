// The forward pass of every supported MoE family in one process: embeddings,
// attention with a KV cache (GQA with NEOX rope, or DeepSeek MLA with an
// absorbed k_b/v_b over a compressed-latent cache), routers (softmax or
// sigmoid with correction bias and grouped top-k), routed and shared experts,
// dense layers, final norm and head. Later issues run the same code split
// across processes; this is the single-process reference.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/engine/kv_cache.h"
#include "common/engine/linear.h"
#include "common/engine/ops.h"
#include "common/engine/routed_experts.h"
#include "common/engine/weights.h"

namespace tandem {
class ModelSource;
}

namespace tandem::engine {

class Model {
 public:
  // Prepares the weights of src; src must outlive the model. `isa` picks the
  // CPU kernels (linear.h): kGeneric is the ggml-faithful reference; main()
  // passes kernels::choose_isa_from_environment().
  explicit Model(const ModelSource& src, kernels::CpuIsa isa = kernels::CpuIsa::kGeneric);
  // A model over weights prepared elsewhere (ModelWeights::from_arena: the
  // dense part of a weight arena, whose routed experts live in the expert
  // workers; set_routed_experts() must then name where they are computed).
  Model(const ModelConfig& config, ModelWeights weights,
        kernels::CpuIsa isa = kernels::CpuIsa::kGeneric);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  KvCache new_cache(int64_t max_positions) const { return KvCache(config_, max_positions); }

  // Runs tokens at positions cache.size() ... cache.size() + n - 1 in one
  // pass, appends them to the cache and returns n rows of vocab logits.
  // Not thread-safe: one sequence at a time per Model (scratch is reused).
  std::vector<float> forward(std::span<const uint32_t> tokens, KvCache& cache);

  // Several sequences in one pass (continuous batching): each appends its
  // tokens to its own cache. Attention runs per sequence over its cache;
  // norms, projections, routers and experts run over all rows together, so a
  // row's numbers do not depend on what else is in the batch. Returns, per
  // sequence, the vocab logits of its last token (n_sequences x vocab).
  // Caches must be distinct; on error no cache has advanced.
  struct Sequence {
    std::span<const uint32_t> tokens;
    KvCache* cache = nullptr;
  };
  std::vector<float> forward_last(std::span<const Sequence> batch);

  // For each token of the last forward(): the smallest routing margin over its
  // MoE layers (gap between the last chosen and the first unchosen expert
  // score, or between the last chosen and first unchosen group). A margin
  // near zero means the routing is a near-tie that rounding can flip.
  const std::vector<float>& route_margins() const { return route_margins_; }

  // Computes routed experts through `experts` (not owned; nullptr: in this
  // process from the model's own weights).
  void set_routed_experts(RoutedExperts* experts) { routed_ = experts; }

 private:
  struct Layer;
  void attention_gqa(const Layer& L, int64_t layer, const float* xn, int64_t n, int64_t pos0,
                     KvCache& cache, float* out);
  void attention_mla(const Layer& L, int64_t layer, const float* xn, int64_t n, int64_t pos0,
                     KvCache& cache, float* out);
  void dense_ffn(const Layer& L, const float* xn, int64_t n, float* out);
  void init_layers();
  // The layers over the rows of `batch` (hidden states in x); leaves the
  // final-normed rows in xn and advances every cache.
  void run_layers(std::span<const Sequence> batch, std::vector<float>& x, std::vector<float>& xn);
  void moe_ffn(const Layer& L, int64_t layer, const float* xn, int64_t n, float* out);
  void local_routed_experts(const Layer& L, const RoutedWork& w);
  void shared_experts(const Layer& L, const float* xn, int64_t n, float* out);

  ModelConfig config_;
  ModelWeights weights_;
  std::vector<Layer> layers_;
  const Weight* embed_;
  const Weight* out_norm_;
  const Weight* head_;
  std::unique_ptr<Rope> rope_;
  float kq_scale_;
  Linear linear_;
  std::vector<float> route_margins_;
  RoutedExperts* routed_ = nullptr;
};

}  // namespace tandem::engine
