// Hugging Face checkpoint folders (config.json + *.safetensors) → Model.
//
// Why RoPE is half-split here although the GGUF "llama" path is interleaved: HF checkpoints
// store Q/K rows in the order HF's rotate_half expects, pairing dimension i with i + d/2;
// llama.cpp's converter permutes those rows to make pairs adjacent, and nothing here does.
// The band-norm witness groups whole rotation pairs, so the pairing must follow the layout
// the weights are actually in.
//
// Matrices stay F16/BF16/F32 views into the safetensors mappings (the CPU matmul reads
// them directly; torch's Linear weight [out, in] is QuantMatrix's [rows, cols]); norm and
// bias vectors are widened to F32 copies the Model owns.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace witcert {

// config.json text → ModelConfig. Supported architectures: LlamaForCausalLM and
// MistralForCausalLM ("llama"), Qwen2ForCausalLM ("qwen2", QKV bias), Qwen3ForCausalLM ("qwen3",
// per-head q/k RMSNorm). Features the forward
// pass does not implement (rope_scaling other than "default", "linear", "llama3" and "yarn",
// which become ModelConfig::rope_freq_factors and rope_attn_factor; attention/MLP biases on
// llama, Qwen2's sliding window, partial rotary, an activation other than silu) are
// Unimplemented naming the key; malformed values are InvalidArgument naming the key.
// Mistral's sliding_window, when smaller than max_position_embeddings, caps context_length
// (below the window, sliding-window attention is full attention).
// yarn also raises context_length to original_max_position_embeddings × factor, the window
// it was made for (as vLLM derives its max_model_len).
absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view config_json, std::string_view where);

// Replaces `config`'s RoPE scaling with a rope_scaling object in config.json's form (an
// operator's override, `model.rope_scaling`): the same types and keys as ParseHfConfig, over
// the loaded head_dim, rope_theta and context_length (yarn's default original window). "null"
// or {"rope_type": "default"} removes any scaling. On error `config` is unchanged.
absl::Status ApplyRopeScalingJson(std::string_view rope_scaling_json, std::string_view where,
                                  ModelConfig* config);

class HfModelLoader {
 public:
  // Loads `folder`: config.json, then every tensor the forward pass needs from the
  // safetensors set, shape-checked against the config (errors name the tensor and file).
  static absl::StatusOr<std::unique_ptr<Model>> Load(
      const std::string& folder, const std::function<void(const std::string&)>& progress = {});

  // Binds tensors from an already opened set (tests use this with their own config).
  static absl::StatusOr<std::unique_ptr<Model>> FromSafetensors(
      ModelConfig config, std::shared_ptr<const SafetensorsSet> tensors);
};

}  // namespace witcert
