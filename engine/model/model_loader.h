// GGUF → Model: the metadata-to-config mapping and the tensor binding, exposed so tests and
// the fuzz target can load a model from an in-memory GgufFile without touching disk.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"

namespace witcert {

// Reads `general.architecture` and the `<arch>.*` hyper-parameters, applies the documented
// defaults and checks the result is self-consistent. InvalidArgument names the key at fault.
absl::StatusOr<ModelConfig> ReadGgufModelConfig(const GgufFile& file);

// Checks a config is usable by the forward pass (positive dims, heads divide, even head_dim).
absl::Status ValidateModelConfig(const ModelConfig& config);

class ModelLoader {
 public:
  // Builds a Model that owns `file` and views its tensors. Every tensor the forward pass
  // reads must exist with the shape the config implies and a supported type.
  static absl::StatusOr<std::unique_ptr<Model>> FromGguf(std::unique_ptr<GgufFile> file);
};

}  // namespace witcert
