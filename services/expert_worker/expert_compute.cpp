#include "services/expert_worker/expert_compute.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/arena/arena.h"
#include "common/arena/arena_plan.h"
#include "common/engine/ops.h"
#include "common/error.h"

namespace tandem::expert {

struct ExpertCompute::Layer {
  kernels::MoeShape shape;
  kernels::MoeKernels kernels;
  std::vector<kernels::MoeExpert> experts;
  std::vector<MatrixView> gate, up, down;  // per expert, for the reference path
};

namespace {

std::vector<MatrixView> expert_views(const arena::ArenaTensor& t, bool f32_activations) {
  const int64_t rows = int64_t(t.shape[1]), cols = int64_t(t.shape[2]);
  const size_t row_bytes = *bytes_for(t.dtype, uint64_t(cols));
  std::vector<MatrixView> out;
  for (uint64_t e = 0; e < t.shape[0]; ++e) {
    MatrixView v{t.dtype, t.bytes.data() + e * uint64_t(rows) * row_bytes, rows, cols, row_bytes};
    v.f32_activations = f32_activations;
    out.push_back(v);
  }
  return out;
}

kernels::WeightLayout layout_of(const arena::Arena& a, const arena::ArenaTensor& t) {
  auto l = kernels::layout_from_name(t.layout);
  if (!l) fail(ErrorKind::kInvalidInput, "arena {}: tensor {} has unknown layout '{}'", a.path(), t.name, t.layout);
  return *l;
}

// An FP8 expert slice's block scales and marks (arena_plan.h); none for
// other types.
struct Fp8Extras {
  const float* scales = nullptr;
  const uint8_t* marks = nullptr;
  size_t scale_stride = 0, scales_per_expert = 0, marks_per_expert = 0;
  std::pair<const float*, const uint8_t*> of(int64_t e) const {
    if (!scales) return {nullptr, nullptr};
    return {scales + size_t(e) * scales_per_expert, marks + size_t(e) * marks_per_expert};
  }
};

Fp8Extras fp8_extras(const arena::Arena& a, const arena::ArenaTensor& t, int worker) {
  Fp8Extras x;
  if (t.dtype != DType::kF8E4M3) return x;
  const arena::ArenaTensor* sc = a.find(arena::fp8_scales_name(t.name), worker);
  const arena::ArenaTensor* mk = a.find(arena::fp8_marks_name(t.name), worker);
  const std::vector<uint64_t> want_sc = arena::fp8_scales_shape(t.shape), want_mk = arena::fp8_marks_shape(t.shape);
  if (!sc || !mk || sc->dtype != DType::kF32 || sc->shape != want_sc || mk->dtype != DType::kU8 ||
      mk->shape != want_mk)
    fail(ErrorKind::kInvalidInput, "arena {}: FP8 experts {} of worker {} lack their block scales or marks "
         "of the slice's shape", a.path(), t.name, worker);
  x.scales = reinterpret_cast<const float*>(sc->bytes.data());
  x.marks = reinterpret_cast<const uint8_t*>(mk->bytes.data());
  x.scale_stride = size_t(want_sc[2]);
  x.scales_per_expert = size_t(want_sc[1] * want_sc[2]);
  x.marks_per_expert = size_t(want_mk[1] * want_mk[2]);
  return x;
}

}  // namespace

ExpertCompute::ExpertCompute(const arena::Arena& a, const ComputeOptions& o, kernels::ThreadPool& pool)
    : pool_(pool), max_tokens_(o.max_tokens), top_k_(o.top_k), isa_(o.isa), linear_(o.isa) {
  if (o.worker < 0 || size_t(o.worker) >= a.worker_nodes().size())
    fail(ErrorKind::kNotFound, "arena {} has {} expert worker slice(s); there is no worker {}",
         a.path(), a.worker_nodes().size(), o.worker);
  const bool hf = a.source_is_hf();
  size_t workspace = 0;
  for (int64_t l = 0;; ++l) {
    const std::string prefix = "blk." + std::to_string(l) + ".";
    if (!a.find(prefix + "attn_norm.weight")) break;
    const arena::ArenaTensor* g = a.find(prefix + "ffn_gate_exps.weight", o.worker);
    const arena::ArenaTensor* u = a.find(prefix + "ffn_up_exps.weight", o.worker);
    const arena::ArenaTensor* d = a.find(prefix + "ffn_down_exps.weight", o.worker);
    if (!g || !u || !d) {
      layers_.emplace_back();
      continue;
    }
    if (g->shape.size() != 3 || u->shape != g->shape || d->shape.size() != 3 ||
        d->shape[0] != g->shape[0] || d->shape[1] != g->shape[2] || d->shape[2] != g->shape[1])
      fail(ErrorKind::kInternal, "arena {}: layer {} expert slices of worker {} have mismatched shapes",
           a.path(), l, o.worker);
    auto L = std::make_unique<Layer>();
    hidden_ = int64_t(g->shape[2]);
    n_experts_ = int64_t(g->shape[0]);
    ffn_begin_ = g->slice_begin;
    ffn_end_ = g->slice_end;
    L->gate = expert_views(*g, hf);
    L->up = expert_views(*u, hf);
    L->down = expert_views(*d, hf);
    kernels::MoeShape& s = L->shape;
    s.gate_up_type = g->dtype;
    s.down_type = d->dtype;
    s.hidden = hidden_;
    s.ffn = int64_t(g->shape[1]);
    s.n_experts = n_experts_;
    s.gate_up_row_stride = L->gate[0].row_stride;
    s.down_row_stride = L->down[0].row_stride;
    s.gate_up_layout = layout_of(a, *g);
    s.down_layout = layout_of(a, *d);
    if (layout_of(a, *u) != s.gate_up_layout)
      fail(ErrorKind::kInternal, "arena {}: layer {} stores gate and up in different layouts", a.path(), l);
    // Hugging Face models' reference computes in f32: their BF16 (and FP8)
    // experts take activations of f32 precision as two bf16 rows.
    s.split_bf16_activations = hf;
    const bool fp8 = g->dtype == DType::kF8E4M3 || u->dtype == DType::kF8E4M3 || d->dtype == DType::kF8E4M3;
    // HF: only where the split gives f32 precision (F32, BF16, FP8 weights;
    // F16 ones would take f16 activations and keep the reference path).
    auto precise = [](DType t) {
      const DType act = kernels::row_dot_activation_type(t);
      return act == DType::kF32 || act == DType::kBF16;
    };
    bool fused = g->dtype == u->dtype && s.ffn > 0 && (!hf || (precise(g->dtype) && precise(d->dtype)));
    if (fused) {
      try {
        kernels::moe_check_shape(s);
      } catch (const Error& e) {
        spdlog::warn("layer {}: the fused MoE kernel cannot take this slice ({}); using the reference path",
                     l, e.what());
        fused = false;
      }
    }
    if (!fused && s.ffn > 0 && (fp8 || s.gate_up_layout != kernels::WeightLayout::kRowMajor ||
                                s.down_layout != kernels::WeightLayout::kRowMajor))
      fail(ErrorKind::kInternal, "arena {}: layer {} has {} experts that only the fused kernel reads",
           a.path(), l, fp8 ? "FP8" : "repacked");
    fused_ = fused_ && fused;
    if (fused) {
      const Fp8Extras fg = fp8_extras(a, *g, o.worker), fu = fp8_extras(a, *u, o.worker),
                      fd = fp8_extras(a, *d, o.worker);
      s.gate_up_scale_stride = fg.scale_stride;
      s.down_scale_stride = fd.scale_stride;
      L->kernels = kernels::moe_kernels(isa_, s);
      for (int64_t e = 0; e < n_experts_; ++e) {
        kernels::MoeExpert x{reinterpret_cast<const uint8_t*>(L->gate[size_t(e)].data),
                             reinterpret_cast<const uint8_t*>(L->up[size_t(e)].data),
                             reinterpret_cast<const uint8_t*>(L->down[size_t(e)].data)};
        std::tie(x.gate_scales, x.gate_marks) = fg.of(e);
        std::tie(x.up_scales, x.up_marks) = fu.of(e);
        std::tie(x.down_scales, x.down_marks) = fd.of(e);
        L->experts.push_back(x);
      }
      workspace = std::max(workspace, kernels::moe_workspace_bytes(s, max_tokens_, top_k_));
    }
    layers_.push_back(std::move(L));
  }
  if (hidden_ == 0)
    fail(ErrorKind::kNotFound, "arena {} has no routed-expert slices for worker {}", a.path(), o.worker);
  workspace_.resize(workspace);
  const size_t F = ffn_end_ - ffn_begin_;
  g_.resize(F);
  u_.resize(F);
  d_.resize(size_t(hidden_));
}

ExpertCompute::~ExpertCompute() = default;

void ExpertCompute::run(int64_t layer, int64_t n_tokens, int top_k, const float* x,
                        const int32_t* expert_ids, const float* expert_weights, float* y) {
  if (layer < 0 || layer >= n_layers() || !layers_[size_t(layer)])
    fail_invalid("layer {} has no routed experts on this worker ({} layers)", layer, n_layers());
  if (n_tokens < 0 || n_tokens > max_tokens_ || top_k != top_k_)
    fail_invalid("{} tokens of top-{} experts; this worker takes up to {} tokens of top-{}", n_tokens,
                 top_k, max_tokens_, top_k_);
  for (int64_t i = 0; i < n_tokens * top_k; ++i)
    if (expert_ids[i] < -1 || expert_ids[i] >= n_experts_)
      fail_invalid("expert id {} out of range [0, {})", expert_ids[i], n_experts_);
  const Layer& L = *layers_[size_t(layer)];
  if (L.shape.ffn == 0) {  // no rows of this layer's F on this worker
    std::fill(y, y + n_tokens * hidden_, 0.0f);
    return;
  }
  if (L.experts.empty()) return run_reference(L, n_tokens, top_k, x, expert_ids, expert_weights, y);
  kernels::MoeBatch b;
  b.n_tokens = n_tokens;
  b.top_k = top_k;
  b.x = x;
  b.x_row_stride = size_t(hidden_);
  b.expert_ids = expert_ids;
  b.expert_weights = expert_weights;
  b.y = y;
  b.y_row_stride = size_t(hidden_);
  kernels::moe_forward(L.kernels, pool_, L.shape, L.experts.data(), b, workspace_.data(),
                       workspace_.size());
}

// The engine's own loop (model moe.cpp), on this worker's slice.
void ExpertCompute::run_reference(const Layer& L, int64_t n_tokens, int top_k, const float* x,
                                  const int32_t* ids, const float* w, float* y) {
  const int64_t H = hidden_, F = int64_t(g_.size());
  std::fill(y, y + n_tokens * H, 0.0f);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int k = 0; k < top_k; ++k) {
      const int32_t e = ids[t * top_k + k];
      if (e < 0) continue;
      linear_(L.gate[size_t(e)], x + t * H, 1, g_.data());
      linear_(L.up[size_t(e)], x + t * H, 1, u_.data());
      engine::swiglu(g_.data(), u_.data(), F);
      linear_(L.down[size_t(e)], g_.data(), 1, d_.data());
      for (int64_t i = 0; i < H; ++i) y[t * H + i] += w[t * top_k + k] * d_[size_t(i)];
    }
}

}  // namespace tandem::expert
