#include "engine/model/model_source.h"

#include <filesystem>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/model/hf_model.h"
#include "engine/model/synthetic_model.h"

namespace witcert {

const char* ModelSourceKindName(ModelSourceKind kind) {
  switch (kind) {
    case ModelSourceKind::kGguf: return "gguf";
    case ModelSourceKind::kHuggingFace: return "huggingface";
    case ModelSourceKind::kSynthetic: return "synthetic";
  }
  return "unknown";
}

absl::StatusOr<ModelSpec> ParseModelSpec(const std::string& spec) {
  namespace fs = std::filesystem;
  ModelSpec out;
  constexpr absl::string_view kSynthetic = "synthetic:";
  if (absl::StartsWith(spec, kSynthetic)) {
    out.kind = ModelSourceKind::kSynthetic;
    std::string rest = spec.substr(kSynthetic.size());
    const size_t q = rest.find('?');
    out.preset = rest.substr(0, q);
    if (q != std::string::npos) {
      const std::string query = rest.substr(q + 1);
      if (!absl::StartsWith(query, "seed=") ||
          !absl::SimpleAtoi(query.substr(5), &out.seed)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model '", spec, "': the only synthetic option is '?seed=N' (N a non-negative "
            "integer), got '?", query, "'"));
      }
    }
    if (out.preset.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", spec, "': expected synthetic:<preset>[?seed=N]"));
    }
    return out;
  }
  std::error_code ec;
  out.path = spec;
  if (fs::is_directory(spec, ec)) {
    if (!fs::exists(fs::path(spec) / "config.json", ec)) {
      return absl::NotFoundError(absl::StrCat(
          "model '", spec, "' is a folder without config.json (a Hugging Face checkpoint "
          "folder needs config.json and *.safetensors)"));
    }
    out.kind = ModelSourceKind::kHuggingFace;
    return out;
  }
  // Anything else is read as GGUF: the reader names a missing file or a wrong magic.
  out.kind = ModelSourceKind::kGguf;
  return out;
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(
    const ModelSpec& spec, const std::function<void(const std::string&)>& progress) {
  switch (spec.kind) {
    case ModelSourceKind::kGguf:
      return Model::LoadGguf(spec.path);
    case ModelSourceKind::kHuggingFace:
      return HfModelLoader::Load(spec.path, progress);
    case ModelSourceKind::kSynthetic:
      return SyntheticModelLoader::Create(spec.preset, spec.seed, progress);
  }
  return absl::InternalError("unknown model source kind");
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(
    const std::string& spec, const std::function<void(const std::string&)>& progress) {
  ASSIGN_OR_RETURN(ModelSpec parsed, ParseModelSpec(spec));
  return LoadModel(parsed, progress);
}

}  // namespace witcert
