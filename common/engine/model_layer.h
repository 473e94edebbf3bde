// Internal: a layer's weights, looked up once by canonical name.
#pragma once

#include "common/engine/model.h"

namespace tandem::engine {

struct Model::Layer {
  const Weight* attn_norm = nullptr;
  const Weight* ffn_norm = nullptr;
  // GQA
  const Weight *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const Weight *bq = nullptr, *bk = nullptr, *bv = nullptr;
  const Weight *q_norm = nullptr, *k_norm = nullptr;
  // MLA (wq is used when there is no q LoRA)
  const Weight *wq_a = nullptr, *q_a_norm = nullptr, *wq_b = nullptr;
  const Weight *wkv_a = nullptr, *kv_a_norm = nullptr, *k_b = nullptr, *v_b = nullptr;
  // FFN
  bool moe = false;
  const Weight *gate = nullptr, *up = nullptr, *down = nullptr;  // dense
  const Weight* router = nullptr;
  const Weight* router_bias = nullptr;
  const Weight *gate_exps = nullptr, *up_exps = nullptr, *down_exps = nullptr;
  const Weight *gate_sh = nullptr, *up_sh = nullptr, *down_sh = nullptr, *gate_inp_sh = nullptr;
};

}  // namespace tandem::engine
