// A tiny Hugging Face checkpoint (llama or qwen2 layout) with deterministic weights, written
// as a safetensors folder, plus the same weights written as a GGUF file the way llama.cpp's
// converter would: names mapped, and for "llama" the Q/K rows of every head permuted from
// HF's half-split pairing (i, i + d/2) to GGUF's interleaved pairing (2i, 2i + 1).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/engine/model/gguf_writer.h"
#include "tests/engine/model/safetensors_writer.h"

namespace witcert::testing {

struct TinyHfSpec {
  std::string arch = "llama";  // "llama", "qwen2" or "qwen3"
  int hidden = 64, heads = 4, kv_heads = 2, ffn = 96, vocab = 48, layers = 2;
  bool tied = false;
  bool write_lm_head = true;          // when untied
  std::string matrix_dtype = "BF16";  // F32, F16, BF16
  std::string vector_dtype = "F32";
  int shards = 1;                     // > 1: split across files with an index
  bool write_index = true;            // with shards > 1
  float rope_theta = 10000.0f;
  std::string rope_scaling = "null";         // config.json's rope_scaling, as JSON
  std::vector<float> gguf_rope_freqs;        // non-empty: the GGUF's rope_freqs tensor [d/2]
  std::string gguf_rope_scaling_type;        // non-empty: GGUF rope.scaling.type (+ factor)
  float gguf_rope_scaling_factor = 1.0f;
  int gguf_rope_original_context = 0;        // > 0: rope.scaling.original_context_length
  std::map<std::string, float> gguf_rope_scaling_f32;  // more rope.scaling.<key> floats (yarn_*)
  // Matrix entries are k·2^-matrix_exponent, |k| ≤ 15 (exact in BF16 and F16). 5 gives
  // σ ≈ 0.28, several times a trained model's 1/√hidden; GPU comparisons use a realistic scale.
  int matrix_exponent = 5;
  int explicit_head_dim = 0;  // > 0: config.json's head_dim and the GGUF's attention.key_length
  int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads; }
};

struct TinyHfTensor {
  std::vector<uint64_t> shape;  // torch order
  std::vector<float> values;
  bool matrix;
};

// name → tensor, in a fixed order (std::map).
inline std::map<std::string, TinyHfTensor> TinyHfTensors(const TinyHfSpec& s) {
  std::map<std::string, TinyHfTensor> t;
  uint32_t seed = 1;
  const uint64_t h = s.hidden, q = s.heads * s.head_dim(), kv = s.kv_heads * s.head_dim();
  auto matrix = [&](const std::string& name, uint64_t rows, uint64_t cols) {
    t[name] = {{rows, cols}, RandomValues(rows * cols, seed++, s.matrix_exponent), true};
  };
  auto vec = [&](const std::string& name, uint64_t n, float offset) {
    t[name] = {{n}, RandomValues(n, seed++, 6, offset), false};
  };
  matrix("model.embed_tokens.weight", s.vocab, h);
  vec("model.norm.weight", h, 1.0f);
  if (!s.tied && s.write_lm_head) matrix("lm_head.weight", s.vocab, h);
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    vec(p + "input_layernorm.weight", h, 1.0f);
    vec(p + "post_attention_layernorm.weight", h, 1.0f);
    matrix(p + "self_attn.q_proj.weight", q, h);
    matrix(p + "self_attn.k_proj.weight", kv, h);
    matrix(p + "self_attn.v_proj.weight", kv, h);
    matrix(p + "self_attn.o_proj.weight", h, q);
    matrix(p + "mlp.gate_proj.weight", s.ffn, h);
    matrix(p + "mlp.up_proj.weight", s.ffn, h);
    matrix(p + "mlp.down_proj.weight", h, s.ffn);
    if (s.arch == "qwen3") {  // per-head q/k RMSNorm weights
      vec(p + "self_attn.q_norm.weight", s.head_dim(), 1.0f);
      vec(p + "self_attn.k_norm.weight", s.head_dim(), 1.0f);
    }
    if (s.arch == "qwen2") {
      vec(p + "self_attn.q_proj.bias", q, 0.0f);
      vec(p + "self_attn.k_proj.bias", kv, 0.0f);
      vec(p + "self_attn.v_proj.bias", kv, 0.0f);
    }
  }
  return t;
}

inline std::string TinyHfConfigJson(const TinyHfSpec& s) {
  const std::string arch =
      s.arch == "qwen2" ? "Qwen2ForCausalLM" : (s.arch == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
  return "{\"architectures\": [\"" + arch + "\"], \"model_type\": \"" + s.arch +
         "\", \"hidden_size\": " + std::to_string(s.hidden) +
         ", \"num_hidden_layers\": " + std::to_string(s.layers) +
         ", \"num_attention_heads\": " + std::to_string(s.heads) +
         ", \"num_key_value_heads\": " + std::to_string(s.kv_heads) +
         ", \"intermediate_size\": " + std::to_string(s.ffn) +
         ", \"vocab_size\": " + std::to_string(s.vocab) +
         ", \"max_position_embeddings\": 256, \"rope_theta\": " + std::to_string(s.rope_theta) +
         ", \"rms_norm_eps\": 1e-06, \"hidden_act\": \"silu\", \"rope_scaling\": " + s.rope_scaling +
         (s.explicit_head_dim > 0 ? ", \"head_dim\": " + std::to_string(s.explicit_head_dim) : std::string()) +
         ", \"tie_word_embeddings\": " + (s.tied ? "true" : "false") + "}";
}

// Writes config.json and the safetensors shard(s) into `dir`.
inline void WriteTinyHfFolder(const TinyHfSpec& s, const std::filesystem::path& dir) {
  WriteFile(dir / "config.json", TinyHfConfigJson(s));
  const auto tensors = TinyHfTensors(s);
  std::vector<SafetensorsWriter> shards(s.shards);
  std::vector<std::string> names;
  std::string weight_map;
  size_t i = 0;
  for (const auto& [name, t] : tensors) {
    const int shard = static_cast<int>(i++ % s.shards);
    shards[shard].Add({name, t.matrix ? s.matrix_dtype : s.vector_dtype, t.shape,
                       Encode(t.values, t.matrix ? s.matrix_dtype : s.vector_dtype)});
    const std::string file = s.shards == 1 ? "model.safetensors"
                                           : "model-0000" + std::to_string(shard + 1) +
                                                 "-of-0000" + std::to_string(s.shards) +
                                                 ".safetensors";
    weight_map += (weight_map.empty() ? "" : ", ") + ("\"" + name + "\": \"" + file + "\"");
    if (shard >= static_cast<int>(names.size())) names.push_back(file);
  }
  for (int k = 0; k < s.shards; ++k) {
    shards[k].SetMetadata("format", "pt");
    WriteFile(dir / names[k], shards[k].Build());
  }
  if (s.shards > 1 && s.write_index) {
    WriteFile(dir / "model.safetensors.index.json",
              "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {" + weight_map + "}}");
  }
}

// HF rows of one projection [heads · d, cols] → GGUF interleaved order: GGUF row 2i of a
// head is HF row i, GGUF row 2i + 1 is HF row i + d/2.
inline std::vector<float> PermuteToInterleaved(const std::vector<float>& w, int heads, int d,
                                               int cols) {
  std::vector<float> out(w.size());
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < d / 2; ++i) {
      for (int c = 0; c < cols; ++c) {
        out[(h * d + 2 * i) * cols + c] = w[(h * d + i) * cols + c];
        out[(h * d + 2 * i + 1) * cols + c] = w[(h * d + i + d / 2) * cols + c];
      }
    }
  }
  return out;
}

inline uint32_t GgmlTypeOf(const std::string& dtype) {
  return dtype == "F32" ? 0 : dtype == "F16" ? 1 : 30;
}

// The same model as a GGUF image ("llama": Q/K permuted to interleaved unless
// `permute_qk` is false, which tests use to show the permutation matters; "qwen2": as is).
inline std::string TinyHfAsGguf(const TinyHfSpec& s, bool permute_qk = true) {
  GgufWriter w;
  const std::string p = s.arch + ".";
  w.AddString("general.architecture", s.arch);
  w.AddString("general.name", "tiny-hf");
  w.AddU32(p + "block_count", s.layers);
  w.AddU32(p + "embedding_length", s.hidden);
  w.AddU32(p + "attention.head_count", s.heads);
  w.AddU32(p + "attention.head_count_kv", s.kv_heads);
  w.AddU32(p + "feed_forward_length", s.ffn);
  w.AddU32(p + "context_length", 256);
  w.AddU32(p + "vocab_size", s.vocab);
  w.AddF32(p + "rope.freq_base", s.rope_theta);
  w.AddF32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (s.explicit_head_dim > 0) w.AddU32(p + "attention.key_length", s.explicit_head_dim);
  if (!s.gguf_rope_scaling_type.empty()) {
    w.AddString(p + "rope.scaling.type", s.gguf_rope_scaling_type);
    w.AddF32(p + "rope.scaling.factor", s.gguf_rope_scaling_factor);
  }
  if (s.gguf_rope_original_context > 0) {
    w.AddU32(p + "rope.scaling.original_context_length", s.gguf_rope_original_context);
  }
  for (const auto& [key, value] : s.gguf_rope_scaling_f32) w.AddF32(p + "rope.scaling." + key, value);
  if (!s.gguf_rope_freqs.empty()) {
    w.AddTensor("rope_freqs.weight", GgmlTypeOf("F32"), {s.gguf_rope_freqs.size()},
                Encode(s.gguf_rope_freqs, "F32"));
  }
  const auto tensors = TinyHfTensors(s);
  const bool permute = s.arch == "llama" && permute_qk;
  auto add = [&](const std::string& hf, const std::string& gguf, int permute_heads = 0) {
    const TinyHfTensor& t = tensors.at(hf);
    std::vector<float> values = t.values;
    if (permute && permute_heads > 0) {
      values = PermuteToInterleaved(values, permute_heads, s.head_dim(),
                                    static_cast<int>(t.shape[1]));
    }
    std::vector<uint64_t> shape(t.shape.rbegin(), t.shape.rend());  // GGUF: ne0 first
    const std::string dtype = t.matrix ? s.matrix_dtype : s.vector_dtype;
    w.AddTensor(gguf, GgmlTypeOf(dtype), shape, Encode(values, dtype));
  };
  add("model.embed_tokens.weight", "token_embd.weight");
  add("model.norm.weight", "output_norm.weight");
  if (!s.tied && s.write_lm_head) add("lm_head.weight", "output.weight");
  for (int i = 0; i < s.layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".";
    const std::string g = "blk." + std::to_string(i) + ".";
    add(h + "input_layernorm.weight", g + "attn_norm.weight");
    add(h + "post_attention_layernorm.weight", g + "ffn_norm.weight");
    add(h + "self_attn.q_proj.weight", g + "attn_q.weight", s.heads);
    add(h + "self_attn.k_proj.weight", g + "attn_k.weight", s.kv_heads);
    add(h + "self_attn.v_proj.weight", g + "attn_v.weight");
    add(h + "self_attn.o_proj.weight", g + "attn_output.weight");
    add(h + "mlp.gate_proj.weight", g + "ffn_gate.weight");
    add(h + "mlp.up_proj.weight", g + "ffn_up.weight");
    add(h + "mlp.down_proj.weight", g + "ffn_down.weight");
    if (s.arch == "qwen3") {
      add(h + "self_attn.q_norm.weight", g + "attn_q_norm.weight");
      add(h + "self_attn.k_norm.weight", g + "attn_k_norm.weight");
    }
    if (s.arch == "qwen2") {
      add(h + "self_attn.q_proj.bias", g + "attn_q.bias");
      add(h + "self_attn.k_proj.bias", g + "attn_k.bias");
      add(h + "self_attn.v_proj.bias", g + "attn_v.bias");
    }
  }
  return w.Build();
}

}  // namespace witcert::testing
