// The model's weights on the GPU, in the layout the CUDA backend's GEMMs read.
//
// Why bf16 and fused: every matrix is dequantized on the host (DequantizeRow, the CPU
// reference's decoder) and rounded to bf16 once at load time, so cuBLAS runs plain bf16
// GEMMs with fp32 accumulation whatever the file's block format. Q, K and V are stacked into
// one [q_dim + 2·kv_dim, hidden] matrix and gate/up into one [2·ffn, hidden] matrix: one
// GEMM each instead of three and two, same arithmetic per output. Norm weights and biases
// stay fp32. Tied embeddings share one device table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/cuda/cuda_util.h"
#include "engine/model/model.h"

namespace witcert {

struct DeviceLayerWeights {
  DeviceArray<uint16_t> wqkv;      // [q_dim + 2·kv_dim, hidden] bf16: rows Q | K | V
  DeviceArray<float> bqkv;         // [q_dim + 2·kv_dim] fp32; empty unless config.qkv_bias
  DeviceArray<uint16_t> wo;        // [hidden, q_dim] bf16
  DeviceArray<uint16_t> w_gate_up; // [2·ffn, hidden] bf16: rows gate | up
  DeviceArray<uint16_t> w_down;    // [hidden, ffn] bf16
  DeviceArray<float> attn_norm;    // [hidden]
  DeviceArray<float> ffn_norm;     // [hidden]
  DeviceArray<float> q_norm;       // [head_dim]; empty unless config.qk_norm (qwen3)
  DeviceArray<float> k_norm;       // [head_dim]; empty unless config.qk_norm
};

struct DeviceWeights {
  DeviceArray<uint16_t> token_embd;  // [vocab, hidden] bf16
  DeviceArray<uint16_t> output_own;  // [vocab, hidden] bf16; empty when tied
  const uint16_t* output = nullptr;  // token_embd or output_own
  DeviceArray<float> output_norm;    // [hidden]
  std::vector<DeviceLayerWeights> layers;
  int64_t bytes = 0;                 // device bytes held
};

// Uploads `model`'s weights. `progress` (may be empty) receives a line per ~10% of layers.
[[nodiscard]] absl::Status UploadWeights(const Model& model, DeviceWeights* out,
                                         const std::function<void(const std::string&)>& progress);

// Host bf16 rounding (round to nearest even; NaN stays NaN).
uint16_t FloatToBf16Bits(float f);

}  // namespace witcert
