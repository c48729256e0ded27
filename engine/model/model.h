// A loaded model: its configuration, its weights and the storage that backs them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace witcert {

class Model {
 public:
  // Loads a GGUF model: validates the architecture ("llama", "qwen2", "qwen3"; anything else is
  // InvalidArgument naming it), reads the config from metadata, and binds every tensor the
  // forward pass needs (a missing or mis-shaped tensor is an error naming it). Weights stay
  // quantized in the mapping.
  static absl::StatusOr<std::unique_ptr<Model>> LoadGguf(const std::string& path);

  const ModelConfig& config() const { return config_; }

  // Replaces the RoPE scaling the checkpoint declared with `rope_scaling_json`, an operator's
  // override in config.json's rope_scaling form (ApplyRopeScalingJson, engine/model/hf_model.h:
  // e.g. yarn for a Qwen2.5 GGUF served past 32k). Call before building a backend from this
  // model. On error (named after `where`) the model is unchanged.
  absl::Status OverrideRopeScaling(std::string_view rope_scaling_json, std::string_view where);
  const Weights& weights() const { return weights_; }
  // The GGUF file the model came from (tokenizer and chat template read it); null for
  // models that did not come from GGUF.
  const GgufFile* gguf() const { return gguf_.get(); }

 private:
  Model() = default;
  ModelConfig config_;
  Weights weights_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<std::vector<uint8_t>> owned_;  // tensors converted at load time, if any
  // Storage behind non-GGUF weights (safetensors mappings, synthetic buffers).
  std::vector<std::shared_ptr<const void>> backing_;
  friend class ModelLoader;
  friend class HfModelLoader;         // engine/model/hf_model.h
  friend class SyntheticModelLoader;  // engine/model/synthetic_model.h
};

}  // namespace witcert
