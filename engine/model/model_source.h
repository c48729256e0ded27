// One entry point for every model a user can name: a GGUF file, a Hugging Face checkpoint
// folder, or a synthetic preset.
//
// The spec is classified before anything is loaded so callers (LoadEngine) can pick the
// matching tokenizer and chat template from the same classification: a path ending in
// ".gguf" → GGUF; a directory holding config.json → Hugging Face; "synthetic:<preset>" with
// an optional "?seed=N" → synthetic (seed 0 by default).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model/model.h"

namespace witcert {

enum class ModelSourceKind { kGguf, kHuggingFace, kSynthetic };

const char* ModelSourceKindName(ModelSourceKind kind);

struct ModelSpec {
  ModelSourceKind kind = ModelSourceKind::kGguf;
  std::string path;    // GGUF file or HF folder
  std::string preset;  // synthetic preset name
  uint64_t seed = 0;   // synthetic seed
};

// InvalidArgument for a malformed synthetic spec (bad seed, unknown option), NotFound for a
// path that is neither a .gguf file nor a folder with config.json (the message says which
// forms are accepted).
absl::StatusOr<ModelSpec> ParseModelSpec(const std::string& spec);

// Parses `spec` and loads it. `progress` (may be empty) receives human-readable steps.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(
    const std::string& spec, const std::function<void(const std::string&)>& progress = {});
absl::StatusOr<std::unique_ptr<Model>> LoadModel(
    const ModelSpec& spec, const std::function<void(const std::string&)>& progress = {});

}  // namespace witcert
