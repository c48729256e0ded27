// What the forward pass needs to know about a model, independent of its file format.
//
// Loaders (GGUF, safetensors, synthetic) fill a ModelConfig; the forward pass, the KV cache
// and the certificate meter read only this struct, never the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace witcert {

// How RoPE pairs the dimensions of a head. The band-norm witness must use the same pairing:
// a band is a set of whole rotation pairs, which is what makes it position invariant.
enum class RopePairing {
  kInterleaved,  // pairs (2i, 2i+1): GGUF "llama" (the converter permutes Q/K rows)
  kHalfSplit,    // pairs (i, i + d/2): GGUF "qwen2", HF safetensors checkpoints
};

const char* RopePairingName(RopePairing pairing);

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", "qwen3"
  std::string name;          // human-readable, from metadata
  int32_t num_layers = 0;
  int32_t hidden_dim = 0;       // d_model
  int32_t num_heads = 0;        // query heads (Hq)
  int32_t num_kv_heads = 0;     // KV heads (Hkv); Hq % Hkv == 0
  int32_t head_dim = 0;         // d
  int32_t ffn_dim = 0;          // SwiGLU inner dimension
  int32_t vocab_size = 0;
  int32_t context_length = 0;   // trained context window
  float rope_theta = 10000.0f;
  // RoPE frequency scaling [head_dim / 2]: pair i's angle pos·θ^(−2i/d) is divided by
  // rope_freq_factors[i] (engine/model/rope_scaling.h: linear, llama3, yarn, GGUF rope_freqs).
  // Empty: unscaled.
  std::vector<float> rope_freq_factors;
  // Multiplies every RoPE cos and sin, so q·k by its square (yarn's attention factor); 1: none.
  float rope_attn_factor = 1.0f;
  float rms_norm_eps = 1e-5f;
  RopePairing rope_pairing = RopePairing::kInterleaved;
  bool qkv_bias = false;        // qwen2 carries biases on Q, K and V
  bool qk_norm = false;         // qwen3: each q and k head RMS-normed (weights [head_dim]) before RoPE
  bool tied_embeddings = false; // output head reuses token_embd

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  int32_t group_size() const { return num_heads / num_kv_heads; }
};

}  // namespace witcert
