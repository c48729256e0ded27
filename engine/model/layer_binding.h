// One decoder layer's tensors bound by name, shared by the GGUF and the safetensors loaders:
// the formats spell the names differently, but the shapes, the optional tensors (QK norms,
// QKV biases) and what a missing one means are the same, so they live here once.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace witcert {

// A layer's tensor names after the layer's prefix ("blk.3.", "model.layers.3.").
struct LayerTensorNames {
  const char* attn_norm;
  const char* q;
  const char* k;
  const char* v;
  const char* q_norm;  // read when config.qk_norm
  const char* k_norm;
  const char* q_bias;  // read when config.qkv_bias
  const char* k_bias;
  const char* v_bias;
  const char* o;
  const char* ffn_norm;
  const char* gate;
  const char* up;
  const char* down;
};

// Binds layer tensors `prefix` + name through `binder`, whose Matrix(name, rows, cols) and
// Vector(name, n) return StatusOr<QuantMatrix> and say which tensor is missing or misshapen.
template <class Binder>
absl::Status BindLayerWeights(Binder& binder, const LayerTensorNames& n, const std::string& prefix,
                              const ModelConfig& c, LayerWeights* l) {
  const int64_t hidden = c.hidden_dim;
  ASSIGN_OR_RETURN(l->attn_norm, binder.Vector(prefix + n.attn_norm, hidden));
  ASSIGN_OR_RETURN(l->wq, binder.Matrix(prefix + n.q, c.q_dim(), hidden));
  ASSIGN_OR_RETURN(l->wk, binder.Matrix(prefix + n.k, c.kv_dim(), hidden));
  ASSIGN_OR_RETURN(l->wv, binder.Matrix(prefix + n.v, c.kv_dim(), hidden));
  if (c.qk_norm) {
    ASSIGN_OR_RETURN(l->q_norm, binder.Vector(prefix + n.q_norm, c.head_dim));
    ASSIGN_OR_RETURN(l->k_norm, binder.Vector(prefix + n.k_norm, c.head_dim));
  }
  if (c.qkv_bias) {
    ASSIGN_OR_RETURN(l->bq, binder.Vector(prefix + n.q_bias, c.q_dim()));
    ASSIGN_OR_RETURN(l->bk, binder.Vector(prefix + n.k_bias, c.kv_dim()));
    ASSIGN_OR_RETURN(l->bv, binder.Vector(prefix + n.v_bias, c.kv_dim()));
  }
  ASSIGN_OR_RETURN(l->wo, binder.Matrix(prefix + n.o, hidden, c.q_dim()));
  ASSIGN_OR_RETURN(l->ffn_norm, binder.Vector(prefix + n.ffn_norm, hidden));
  ASSIGN_OR_RETURN(l->w_gate, binder.Matrix(prefix + n.gate, c.ffn_dim, hidden));
  ASSIGN_OR_RETURN(l->w_up, binder.Matrix(prefix + n.up, c.ffn_dim, hidden));
  ASSIGN_OR_RETURN(l->w_down, binder.Matrix(prefix + n.down, hidden, c.ffn_dim));
  return absl::OkStatus();
}

}  // namespace witcert
