// Binds a GGUF file's tensors to the Weights the forward pass reads.
//
// Weights stay in the file's mapping in their stored encoding (no copy: a 100 MB model
// opens in milliseconds). The one exception is the small vectors the CPU ops read as plain
// floats (norm weights, QKV biases): when a file stores them as F16/BF16 they are widened
// once here into Model::owned_, so every consumer can assume F32 for them.
#include "engine/model/model.h"

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/model/hf_model.h"
#include "engine/model/layer_binding.h"
#include "engine/model/model_loader.h"
#include "engine/model/rope_scaling.h"

namespace witcert {
namespace {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 → 127
  } else if (mant == 0) {
    bits = sign;  // ±0
  } else {
    // Subnormal half: normalise the mantissa.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// GGUF's names of a layer's tensors (llama.cpp's convention).
constexpr LayerTensorNames kGgufLayerNames{
    .attn_norm = "attn_norm.weight", .q = "attn_q.weight", .k = "attn_k.weight", .v = "attn_v.weight",
    .q_norm = "attn_q_norm.weight", .k_norm = "attn_k_norm.weight", .q_bias = "attn_q.bias",
    .k_bias = "attn_k.bias", .v_bias = "attn_v.bias", .o = "attn_output.weight", .ffn_norm = "ffn_norm.weight",
    .gate = "ffn_gate.weight", .up = "ffn_up.weight", .down = "ffn_down.weight"};

}  // namespace

// Stateful helper: the model under construction and the file it views.
class ModelBinder {
 public:
  ModelBinder(std::vector<std::vector<uint8_t>>* owned, const GgufFile& file)
      : owned_(owned), file_(file) {}

  // A weight matrix [rows, cols] stored as GGUF [ne0 = cols, ne1 = rows].
  absl::StatusOr<QuantMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols) {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Lookup(name, {cols, rows}));
    const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(t->type));
    if (!info->supported) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_.path(), ": tensor '", name, "' has type ", Av(info->name), " (ggml type ",
          static_cast<uint32_t>(t->type), ") which this build cannot multiply"));
    }
    return QuantMatrix{t->type, rows, cols, GgmlRowBytes(*info, static_cast<size_t>(cols)),
                       t->data};
  }

  // A vector [1, n] the ops read as F32; F16/BF16 are widened into model-owned storage.
  absl::StatusOr<QuantMatrix> Vector(const std::string& name, int64_t n) {
    ASSIGN_OR_RETURN(const GgufTensorInfo* t, Lookup(name, {n}));
    const size_t row_bytes = static_cast<size_t>(n) * sizeof(float);
    if (t->type == GgmlType::kF32) {
      return QuantMatrix{GgmlType::kF32, 1, n, row_bytes, t->data};
    }
    if (t->type != GgmlType::kF16 && t->type != GgmlType::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_.path(), ": tensor '", name, "' has type ",
          Av(GetGgmlTypeInfo(static_cast<uint32_t>(t->type))->name), " (ggml type ",
          static_cast<uint32_t>(t->type), "); norm and bias vectors must be F32, F16 or BF16"));
    }
    std::vector<uint8_t>& buf = owned_->emplace_back(row_bytes);  // [n] f32
    float* out = reinterpret_cast<float*>(buf.data());
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, sizeof(h));
      out[i] = t->type == GgmlType::kF16 ? HalfToFloat(h) : Bf16ToFloat(h);
    }
    return QuantMatrix{GgmlType::kF32, 1, n, row_bytes, buf.data()};
  }

  bool Has(const std::string& name) const { return file_.FindTensor(name) != nullptr; }

 private:
  // Finds `name` and checks its GGUF shape equals `expected` (trailing 1s ignored).
  absl::StatusOr<const GgufTensorInfo*> Lookup(const std::string& name,
                                               std::vector<int64_t> expected) {
    const GgufTensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": missing tensor '", name,
                                                     "' (expected shape ", ShapeString(expected),
                                                     ")"));
    }
    std::vector<int64_t> actual = t->shape;
    while (actual.size() > expected.size() && actual.back() == 1) actual.pop_back();
    if (actual != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_.path(), ": tensor '", name, "' has shape ", ShapeString(t->shape),
                       ", expected ", ShapeString(expected), " (GGUF order: ne0 = columns first)"));
    }
    return t;
  }

  std::vector<std::vector<uint8_t>>* owned_;  // Model::owned_
  const GgufFile& file_;
};

absl::StatusOr<std::unique_ptr<Model>> ModelLoader::FromGguf(std::unique_ptr<GgufFile> file) {
  ASSIGN_OR_RETURN(ModelConfig c, ReadGgufModelConfig(*file));
  std::unique_ptr<Model> model(new Model());
  ModelBinder b(&model->owned_, *file);
  Weights& w = model->weights_;
  const int64_t hidden = c.hidden_dim;

  // Llama 3.1+ files carry their RoPE frequency factors (llama3 scaling) as a tensor; they
  // compose with a linear factor from the metadata (ReadGgufModelConfig).
  if (b.Has("rope_freqs.weight")) {
    ASSIGN_OR_RETURN(QuantMatrix f, b.Vector("rope_freqs.weight", c.head_dim / 2));
    std::vector<float> factors(static_cast<size_t>(c.head_dim / 2));
    std::memcpy(factors.data(), f.data, factors.size() * sizeof(float));
    for (size_t i = 0; i < factors.size() && !c.rope_freq_factors.empty(); ++i) {
      factors[i] *= c.rope_freq_factors[i];
    }
    if (absl::Status s = ValidateRopeFactors(factors, c.head_dim); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(file->path(), ": tensor 'rope_freqs.weight': ", s.message()));
    }
    c.rope_freq_factors = std::move(factors);
  }
  ASSIGN_OR_RETURN(w.token_embd, b.Matrix("token_embd.weight", c.vocab_size, hidden));
  ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", hidden));
  if (b.Has("output.weight")) {
    ASSIGN_OR_RETURN(w.output, b.Matrix("output.weight", c.vocab_size, hidden));
    c.tied_embeddings = false;
  } else {
    w.output = w.token_embd;
    c.tied_embeddings = true;
  }

  // Each layer needs at least 9 tensors; checking before sizing `layers` keeps a corrupt
  // block_count from allocating gigabytes.
  if (static_cast<uint64_t>(c.num_layers) * 9 > file->tensors().size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file->path(), ": ", c.architecture, ".block_count = ", c.num_layers, " needs at least ",
        int64_t{c.num_layers} * 9, " tensors but the file holds ", file->tensors().size()));
  }
  w.layers.resize(c.num_layers);
  for (int32_t i = 0; i < c.num_layers; ++i) {
    RETURN_IF_ERROR(BindLayerWeights(b, kGgufLayerNames, absl::StrCat("blk.", i, "."), c, &w.layers[i]));
  }
  model->config_ = std::move(c);
  model->gguf_ = std::move(file);
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> Model::LoadGguf(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  return ModelLoader::FromGguf(std::move(file));
}

absl::Status Model::OverrideRopeScaling(std::string_view rope_scaling_json, std::string_view where) {
  return ApplyRopeScalingJson(rope_scaling_json, where, &config_);
}

}  // namespace witcert
