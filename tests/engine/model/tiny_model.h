// A tiny synthetic llama/qwen2 GGUF model for loader tests and the fuzz driver's seeds.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/engine/model/gguf_writer.h"

namespace witcert::testing {

// A tiny model: hidden 64, 4 heads of 16, 2 KV heads, ffn 96, vocab 40, 2 layers.
struct TinySpec {
  std::string arch = "llama";
  uint32_t hidden = 64, heads = 4, kv_heads = 2, ffn = 96, vocab = 40, layers = 2;
  bool tied = true;
  bool write_kv_heads = true;
  uint32_t matrix_type = 3;  // Q4_1
  uint32_t norm_type = 0;    // F32
};

// Norm vector values: i * 0.25 - 1, exact in F32, F16 and BF16.
inline float NormValue(size_t i) { return static_cast<float>(i) * 0.25f - 1.0f; }

inline std::string NormBytes(uint32_t type, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const float v = NormValue(i);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (type == 0) {
      testing::AppendPod<float>(&out, v);
    } else if (type == 30) {
      testing::AppendPod<uint16_t>(&out, static_cast<uint16_t>(bits >> 16));  // exact: low bits 0
    } else {
      // F16 by hand for these values: sign, exponent rebias 127 → 15, top 10 mantissa bits.
      uint16_t h = 0;
      if (v != 0.0f) {
        const uint32_t exp = ((bits >> 23) & 0xFF) - 112;
        h = static_cast<uint16_t>(((bits >> 16) & 0x8000) | (exp << 10) | ((bits >> 13) & 0x3FF));
      }
      testing::AppendPod<uint16_t>(&out, h);
    }
  }
  return out;
}

inline GgufWriter TinyWriter(const TinySpec& s) {
  GgufWriter w;
  const std::string p = s.arch + ".";
  w.AddString("general.architecture", s.arch);
  w.AddString("general.name", "tiny");
  w.AddU32(p + "block_count", s.layers);
  w.AddU32(p + "embedding_length", s.hidden);
  w.AddU32(p + "attention.head_count", s.heads);
  if (s.write_kv_heads) w.AddU32(p + "attention.head_count_kv", s.kv_heads);
  w.AddU32(p + "feed_forward_length", s.ffn);
  w.AddU32(p + "context_length", 256);
  w.AddF32(p + "rope.freq_base", 500000.0f);
  w.AddF32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<std::string> tokens;
  for (uint32_t i = 0; i < s.vocab; ++i) {
    tokens.emplace_back(1, 't');  // "t<i>"; built in two steps to dodge GCC 12 -Wrestrict
    tokens.back() += std::to_string(i);
  }
  w.AddStringArray("tokenizer.ggml.tokens", tokens);

  const uint32_t kv_heads = s.write_kv_heads ? s.kv_heads : s.heads;
  const uint64_t head_dim = s.hidden / s.heads, q = s.hidden, kv = kv_heads * head_dim;
  w.AddTensor("token_embd.weight", 8, {s.hidden, s.vocab});  // Q8_0
  w.AddTensor("output_norm.weight", s.norm_type, {s.hidden}, NormBytes(s.norm_type, s.hidden));
  if (!s.tied) w.AddTensor("output.weight", 14, {s.hidden, s.vocab});  // Q6_K needs 256 cols
  for (uint32_t i = 0; i < s.layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    w.AddTensor(b + "attn_norm.weight", s.norm_type, {s.hidden}, NormBytes(s.norm_type, s.hidden));
    w.AddTensor(b + "attn_q.weight", s.matrix_type, {s.hidden, q});
    w.AddTensor(b + "attn_k.weight", s.matrix_type, {s.hidden, kv});
    w.AddTensor(b + "attn_v.weight", s.matrix_type, {s.hidden, kv});
    if (s.arch == "qwen2") {
      w.AddTensor(b + "attn_q.bias", s.norm_type, {q}, NormBytes(s.norm_type, q));
      w.AddTensor(b + "attn_k.bias", s.norm_type, {kv}, NormBytes(s.norm_type, kv));
      w.AddTensor(b + "attn_v.bias", s.norm_type, {kv}, NormBytes(s.norm_type, kv));
    }
    w.AddTensor(b + "attn_output.weight", s.matrix_type, {q, s.hidden});
    w.AddTensor(b + "ffn_norm.weight", s.norm_type, {s.hidden}, NormBytes(s.norm_type, s.hidden));
    w.AddTensor(b + "ffn_gate.weight", s.matrix_type, {s.hidden, s.ffn});
    w.AddTensor(b + "ffn_up.weight", s.matrix_type, {s.hidden, s.ffn});
    w.AddTensor(b + "ffn_down.weight", s.matrix_type, {s.ffn, s.hidden});
  }
  return w;
}

}  // namespace witcert::testing
