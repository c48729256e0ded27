// The tensors of a decoder-only transformer, as views into storage a loader owns.
#pragma once

#include <vector>

#include "kernels/cpu/quant_matrix.h"

namespace witcert {

struct LayerWeights {
  QuantMatrix attn_norm;  // [1, hidden] F32
  QuantMatrix wq;         // [q_dim, hidden]
  QuantMatrix wk;         // [kv_dim, hidden]
  QuantMatrix wv;         // [kv_dim, hidden]
  QuantMatrix bq, bk, bv; // [1, q_dim] / [1, kv_dim] F32; empty unless config.qkv_bias
  QuantMatrix q_norm, k_norm;  // [1, head_dim] F32; empty unless config.qk_norm
  QuantMatrix wo;         // [hidden, q_dim]
  QuantMatrix ffn_norm;   // [1, hidden] F32
  QuantMatrix w_gate;     // [ffn, hidden]
  QuantMatrix w_up;       // [ffn, hidden]
  QuantMatrix w_down;     // [hidden, ffn]
};

struct Weights {
  QuantMatrix token_embd;   // [vocab, hidden]
  QuantMatrix output_norm;  // [1, hidden] F32
  QuantMatrix output;       // [vocab, hidden]; == token_embd when embeddings are tied
  std::vector<LayerWeights> layers;
};

}  // namespace witcert
