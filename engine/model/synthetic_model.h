// Synthetic models: the exact shapes of real checkpoints with seeded random weights, for
// benchmarks where the real weights cannot be had (and a tiny preset for tests).
//
// Why counter-based randomness: weight element i of tensor t is a pure function of (seed, t,
// i), so the same seed gives bit-identical weights whatever the thread count or generation
// order, and any element can be recomputed independently (tests do). Every matrix
// [rows, cols] is uniform with standard deviation 1/sqrt(cols) (the fan-in), which keeps
// each projection's output at the scale of its normalised input, so activations and logits
// stay finite and O(1)-ish through any depth; norms are 1. Matrices are stored as BF16, the
// format the GPU path runs real checkpoints in; norms and biases as F32.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"

namespace witcert {

// Preset names: "llama-3.1-8b", "qwen2.5-7b", "qwen2.5-1.5b", "tiny", "tiny-qwen2".
std::vector<std::string> SyntheticPresetNames();
// InvalidArgument listing the presets for an unknown name.
absl::StatusOr<ModelConfig> SyntheticPresetConfig(std::string_view preset);
// Bytes the weights of `config` take when synthesised (BF16 matrices, F32 vectors).
int64_t SyntheticWeightBytes(const ModelConfig& config);

// The value (before BF16 rounding) of element `index` of synthetic tensor `tensor_id`:
// uniform on [-sqrt(3)·stddev, sqrt(3)·stddev).
float SyntheticUniform(uint64_t seed, uint32_t tensor_id, uint64_t index, float stddev);

// Tensor ids used by SyntheticUniform: fixed by position in the model, not by architecture.
inline constexpr uint32_t kSyntheticEmbeddingId = 0;
inline constexpr uint32_t kSyntheticOutputId = 1;
enum class SyntheticLayerTensor : uint32_t {
  kWq = 0, kWk, kWv, kWo, kGate, kUp, kDown, kBq, kBk, kBv, kCount,
};
inline uint32_t SyntheticTensorId(int32_t layer, SyntheticLayerTensor t) {
  return 2 + static_cast<uint32_t>(layer) * static_cast<uint32_t>(SyntheticLayerTensor::kCount) +
         static_cast<uint32_t>(t);
}

class SyntheticModelLoader {
 public:
  // `progress` receives "synthetic weights: P% (done/total tensors)" lines as tensors
  // complete. `num_threads` <= 0 → all cores.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      std::string_view preset, uint64_t seed,
      const std::function<void(const std::string&)>& progress = {}, int num_threads = 0);
  static absl::StatusOr<std::unique_ptr<Model>> FromConfig(
      ModelConfig config, uint64_t seed,
      const std::function<void(const std::string&)>& progress = {}, int num_threads = 0);
};

}  // namespace witcert
