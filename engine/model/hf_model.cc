#include "engine/model/hf_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/model/layer_binding.h"
#include "engine/model/model_loader.h"
#include "engine/model/rope_scaling.h"
#include "kernels/cpu/matmul.h"
#include "nlohmann/json.hpp"

namespace witcert {
namespace {

using Json = nlohmann::json;

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Reads one key of config.json with the checks its use needs.
class ConfigReader {
 public:
  ConfigReader(const Json& j, std::string_view where) : j_(j), where_(where) {}

  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  absl::StatusOr<int32_t> PositiveInt(const char* key) const {
    if (!Has(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Av(where_), ": required key \"", key, "\" is missing"));
    }
    const Json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Av(where_), ": \"", key, "\" = ", v.dump(), " is not a positive int32"));
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  absl::StatusOr<int32_t> PositiveInt(const char* key, int32_t fallback) const {
    if (!Has(key)) return fallback;
    return PositiveInt(key);
  }

  absl::StatusOr<float> PositiveFloat(const char* key, float fallback) const {
    if (!Has(key)) return fallback;
    const Json& v = j_[key];
    // The range test comes before the conversion: a double beyond float's range has no float
    // value (converting it is undefined behaviour, not inf).
    const double d = v.is_number() ? v.get<double>() : 0.0;
    if (!v.is_number() || !(d > 0.0) || !(d <= std::numeric_limits<float>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(Av(where_), ": \"", key, "\" = ", v.dump(),
                                                     " is not a positive finite float"));
    }
    return static_cast<float>(d);
  }

  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!j_[key].is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Av(where_), ": \"", key, "\" = ", j_[key].dump(), " is not a boolean"));
    }
    return j_[key].get<bool>();
  }

  // A feature flag the forward pass cannot honour when true.
  absl::Status Unsupported(const char* key, const char* what) const {
    ASSIGN_OR_RETURN(bool on, Bool(key, false));
    if (on) {
      return absl::UnimplementedError(
          absl::StrCat(Av(where_), ": \"", key, "\": true (", what, ") is not supported"));
    }
    return absl::OkStatus();
  }

 private:
  const Json& j_;
  std::string_view where_;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

GgmlType ToGgml(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF16: return GgmlType::kF16;
    case SafetensorsDtype::kBF16: return GgmlType::kBF16;
    default: return GgmlType::kF32;  // RequireFloat has ruled out the rest
  }
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The Hugging Face names of a Llama/Qwen2/Mistral-style layer's tensors.
constexpr LayerTensorNames kHfLayerNames{
    .attn_norm = "input_layernorm.weight", .q = "self_attn.q_proj.weight", .k = "self_attn.k_proj.weight",
    .v = "self_attn.v_proj.weight", .q_norm = "self_attn.q_norm.weight", .k_norm = "self_attn.k_norm.weight",
    .q_bias = "self_attn.q_proj.bias", .k_bias = "self_attn.k_proj.bias", .v_bias = "self_attn.v_proj.bias",
    .o = "self_attn.o_proj.weight", .ffn_norm = "post_attention_layernorm.weight", .gate = "mlp.gate_proj.weight",
    .up = "mlp.up_proj.weight", .down = "mlp.down_proj.weight"};

// Binds named tensors of the set as QuantMatrix views (matrices) or F32 copies (vectors).
class TensorBinder {
 public:
  TensorBinder(const SafetensorsSet& set, std::vector<std::vector<uint8_t>>* owned)
      : set_(set), owned_(owned) {}

  absl::StatusOr<QuantMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols) {
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, Lookup(name, {rows, cols}));
    const size_t row_bytes = static_cast<size_t>(cols) * SafetensorsDtypeSize(t->dtype);
    return QuantMatrix{ToGgml(t->dtype), rows, cols, row_bytes, t->data};
  }

  absl::StatusOr<QuantMatrix> Vector(const std::string& name, int64_t n) {
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, Lookup(name, {n}));
    // Always copied: the mapping only guarantees the dtype's own alignment, and the ops
    // read these as float[].
    std::vector<uint8_t>& buf = owned_->emplace_back(static_cast<size_t>(n) * sizeof(float));
    const QuantMatrix view{ToGgml(t->dtype), 1, n, t->size_bytes, t->data};
    DequantizeRow(view, 0, reinterpret_cast<float*>(buf.data()));  // [n] f32
    return QuantMatrix{GgmlType::kF32, 1, n, buf.size(), buf.data()};
  }

  bool Has(const std::string& name) const { return set_.Find(name) != nullptr; }

 private:
  absl::StatusOr<const SafetensorsTensor*> Lookup(const std::string& name,
                                                  const std::vector<int64_t>& expected) {
    const SafetensorsTensor* t = set_.Find(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(set_.folder(), ": missing tensor '", name,
                                                     "' (expected shape ",
                                                     ShapeString(expected), ")"));
    }
    RETURN_IF_ERROR(RequireFloat(*t));
    if (t->shape != expected) {
      return absl::InvalidArgumentError(absl::StrCat(*t->path, ": tensor '", name,
                                                     "' has shape ", ShapeString(t->shape),
                                                     ", the config implies ",
                                                     ShapeString(expected)));
    }
    return t;
  }

  const SafetensorsSet& set_;
  std::vector<std::vector<uint8_t>>* owned_;
};

// One HF rope_scaling object → c's rope_freq_factors, rope_attn_factor and (yarn) context_length.
// c's head_dim, rope_theta and context_length (max_position_embeddings) must be set.
absl::Status ApplyRopeScaling(const Json& s, const std::string& where, ModelConfig* c) {
  std::string type;
  if (s.is_object()) {
    for (const char* key : {"rope_type", "type"}) {
      if (s.contains(key) && s[key].is_string()) type = s[key].get<std::string>();
    }
  } else if (!s.is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " = ", s.dump(), " is not an object"));
  }
  const ConfigReader rs(s, where);
  auto required = [&](const char* key) -> absl::StatusOr<float> {
    if (!rs.Has(key)) {
      return absl::InvalidArgumentError(absl::StrCat(where, " of type '", type, "' needs \"", key, "\""));
    }
    return rs.PositiveFloat(key, 0.0f);
  };
  std::vector<float> factors;
  float attn_factor = 1.0f;
  absl::Status made = absl::OkStatus();
  if (type == "linear") {
    ASSIGN_OR_RETURN(float factor, required("factor"));
    made = LinearRopeFactors(factor, c->head_dim, &factors);
  } else if (type == "llama3") {
    Llama3RopeScaling l;
    ASSIGN_OR_RETURN(l.factor, required("factor"));
    ASSIGN_OR_RETURN(l.low_freq_factor, required("low_freq_factor"));
    ASSIGN_OR_RETURN(l.high_freq_factor, required("high_freq_factor"));
    ASSIGN_OR_RETURN(l.original_context, required("original_max_position_embeddings"));
    made = Llama3RopeFactors(l, c->rope_theta, c->head_dim, &factors);
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters: the given factor; the original window from
    // rope_scaling, else max_position_embeddings; attention_factor, else DeepSeek's
    // mscale / mscale_all_dim ratio when both are set, else 1 + 0.1·ln(factor).
    YarnRopeScaling y;
    ASSIGN_OR_RETURN(y.factor, required("factor"));
    ASSIGN_OR_RETURN(y.original_context,
                     rs.PositiveFloat("original_max_position_embeddings", static_cast<float>(c->context_length)));
    ASSIGN_OR_RETURN(y.beta_fast, rs.PositiveFloat("beta_fast", 32.0f));
    ASSIGN_OR_RETURN(y.beta_slow, rs.PositiveFloat("beta_slow", 1.0f));
    ASSIGN_OR_RETURN(y.truncate, rs.Bool("truncate", true));
    double attention = YarnAttentionFactor(y.factor);
    if (rs.Has("attention_factor")) {
      ASSIGN_OR_RETURN(float a, rs.PositiveFloat("attention_factor", 1.0f));
      attention = a;
    } else if (rs.Has("mscale") && rs.Has("mscale_all_dim")) {
      ASSIGN_OR_RETURN(float m, rs.PositiveFloat("mscale", 1.0f));
      ASSIGN_OR_RETURN(float m_all, rs.PositiveFloat("mscale_all_dim", 1.0f));
      attention = YarnAttentionFactor(y.factor, m) / YarnAttentionFactor(y.factor, m_all);
    }
    made = YarnRopeFactors(y, c->rope_theta, c->head_dim, &factors);
    attn_factor = static_cast<float>(attention);
    if (made.ok()) c->context_length = YarnContextLength(y, c->context_length);
  } else if (type != "default" && !s.is_null()) {
    return absl::UnimplementedError(absl::StrCat(
        where, " of type '", type.empty() ? s.dump() : type,
        "' is not supported (default, linear, llama3 and yarn are); it changes more than the "
        "rotation frequencies, so running without it would be a different model"));
  }
  if (!made.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", made.message()));
  DropIdentityRopeScaling(attn_factor, &factors);
  c->rope_freq_factors = std::move(factors);
  c->rope_attn_factor = attn_factor;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view config_json, std::string_view where) {
  const Json j = Json::parse(config_json.begin(), config_json.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(Av(where), ": not a JSON object"));
  }
  const ConfigReader r(j, where);
  if (!r.Has("architectures") || !j["architectures"].is_array() ||
      j["architectures"].empty() || !j["architectures"][0].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(where), ": \"architectures\" must be a non-empty list of names"));
  }
  const std::string arch = j["architectures"][0].get<std::string>();
  ModelConfig c;
  c.rope_pairing = RopePairing::kHalfSplit;
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM") {
    c.architecture = "llama";
    RETURN_IF_ERROR(r.Unsupported("attention_bias", "biases on q/k/v/o projections"));
    RETURN_IF_ERROR(r.Unsupported("mlp_bias", "biases on MLP projections"));
  } else if (arch == "Qwen2ForCausalLM") {
    c.architecture = "qwen2";
    c.qkv_bias = true;
    RETURN_IF_ERROR(r.Unsupported("use_sliding_window", "sliding-window attention"));
  } else if (arch == "Qwen3ForCausalLM") {
    c.architecture = "qwen3";
    c.qk_norm = true;
    RETURN_IF_ERROR(r.Unsupported("attention_bias", "biases on q/k/v/o projections"));
    RETURN_IF_ERROR(r.Unsupported("use_sliding_window", "sliding-window attention"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        Av(where), ": unsupported architecture '", arch,
        "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)"));
  }
  if (r.Has("_name_or_path") && j["_name_or_path"].is_string()) {
    c.name = j["_name_or_path"].get<std::string>();
  }
  if (r.Has("hidden_act") &&
      (!j["hidden_act"].is_string() || j["hidden_act"].get<std::string>() != "silu")) {
    return absl::UnimplementedError(absl::StrCat(Av(where), ": \"hidden_act\" = ",
                                                 j["hidden_act"].dump(), " (only silu)"));
  }
  ASSIGN_OR_RETURN(c.hidden_dim, r.PositiveInt("hidden_size"));
  ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("num_hidden_layers"));
  ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("num_attention_heads"));
  ASSIGN_OR_RETURN(c.num_kv_heads, r.PositiveInt("num_key_value_heads", c.num_heads));
  ASSIGN_OR_RETURN(c.ffn_dim, r.PositiveInt("intermediate_size"));
  ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  ASSIGN_OR_RETURN(c.context_length, r.PositiveInt("max_position_embeddings"));
  ASSIGN_OR_RETURN(c.rope_theta, r.PositiveFloat("rope_theta", 10000.0f));
  ASSIGN_OR_RETURN(c.rms_norm_eps, r.PositiveFloat("rms_norm_eps", 1e-6f));
  ASSIGN_OR_RETURN(c.tied_embeddings, r.Bool("tie_word_embeddings", false));
  if (r.Has("head_dim")) {
    ASSIGN_OR_RETURN(c.head_dim, r.PositiveInt("head_dim"));
  } else if (c.hidden_dim % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(Av(where), ": hidden_size ", c.hidden_dim,
                                                   " is not a multiple of num_attention_heads ",
                                                   c.num_heads, " and there is no head_dim"));
  } else {
    c.head_dim = c.hidden_dim / c.num_heads;
  }
  if (r.Has("partial_rotary_factor")) {
    ASSIGN_OR_RETURN(float f, r.PositiveFloat("partial_rotary_factor", 1.0f));
    if (f != 1.0f) {
      return absl::UnimplementedError(absl::StrCat(
          Av(where), ": \"partial_rotary_factor\" = ", f, " (partial rotary) is not supported"));
    }
  }
  if (r.Has("rope_scaling")) {
    RETURN_IF_ERROR(ApplyRopeScaling(j["rope_scaling"], absl::StrCat(Av(where), ": \"rope_scaling\""), &c));
  }
  if (arch == "MistralForCausalLM" && r.Has("sliding_window")) {
    ASSIGN_OR_RETURN(int32_t window, r.PositiveInt("sliding_window"));
    c.context_length = std::min(c.context_length, window);
  }
  if (absl::Status s = ValidateModelConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Av(where), ": ", s.message()));
  }
  return c;
}

absl::Status ApplyRopeScalingJson(std::string_view rope_scaling_json, std::string_view where,
                                  ModelConfig* config) {
  const Json s = Json::parse(rope_scaling_json.begin(), rope_scaling_json.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (s.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(Av(where), ": not valid JSON"));
  }
  ModelConfig scaled = *config;
  RETURN_IF_ERROR(ApplyRopeScaling(s, std::string(where), &scaled));
  RETURN_IF_ERROR(ValidateModelConfig(scaled));
  *config = std::move(scaled);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> HfModelLoader::FromSafetensors(
    ModelConfig c, std::shared_ptr<const SafetensorsSet> tensors) {
  std::unique_ptr<Model> model(new Model());
  TensorBinder b(*tensors, &model->owned_);
  Weights& w = model->weights_;
  const int64_t hidden = c.hidden_dim;

  ASSIGN_OR_RETURN(w.token_embd, b.Matrix("model.embed_tokens.weight", c.vocab_size, hidden));
  ASSIGN_OR_RETURN(w.output_norm, b.Vector("model.norm.weight", hidden));
  // HF ties by config: with tie_word_embeddings a stray lm_head is ignored, as torch does.
  if (!c.tied_embeddings && b.Has("lm_head.weight")) {
    ASSIGN_OR_RETURN(w.output, b.Matrix("lm_head.weight", c.vocab_size, hidden));
  } else {
    w.output = w.token_embd;
    c.tied_embeddings = true;
  }
  // Each layer needs at least 9 tensors: check before sizing `layers`.
  if (static_cast<uint64_t>(c.num_layers) * 9 > tensors->num_tensors()) {
    return absl::InvalidArgumentError(absl::StrCat(
        tensors->folder(), ": num_hidden_layers = ", c.num_layers, " needs at least ",
        int64_t{c.num_layers} * 9, " tensors but the checkpoint holds ",
        tensors->num_tensors()));
  }
  w.layers.resize(c.num_layers);
  for (int32_t i = 0; i < c.num_layers; ++i) {
    RETURN_IF_ERROR(BindLayerWeights(b, kHfLayerNames, absl::StrCat("model.layers.", i, "."), c, &w.layers[i]));
  }
  model->config_ = std::move(c);
  model->backing_.push_back(std::move(tensors));
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> HfModelLoader::Load(
    const std::string& folder, const std::function<void(const std::string&)>& progress) {
  const std::string config_path = (std::filesystem::path(folder) / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFile(config_path));
  ASSIGN_OR_RETURN(ModelConfig config, ParseHfConfig(text, config_path));
  if (config.name.empty()) {
    config.name = std::filesystem::path(folder).lexically_normal().filename().string();
    if (config.name.empty()) {
      config.name = std::filesystem::path(folder).lexically_normal().parent_path().filename();
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsSet> set, SafetensorsSet::OpenFolder(folder));
  if (progress) {
    progress(absl::StrCat("mapped ", set->files().size(), " safetensors shard(s), ",
                          set->num_tensors(), " tensors"));
  }
  return FromSafetensors(std::move(config), std::move(set));
}

}  // namespace witcert
