// GGUF metadata → ModelConfig.
//
// Why the RoPE pairing is fixed by architecture rather than read from the file: GGUF has no
// key for it. llama.cpp's "llama" converter permutes the Q/K rows of HF checkpoints so that
// adjacent dimensions (2i, 2i+1) rotate together; "qwen2" files keep HF's layout, where
// dimension i pairs with i + d/2. The band-norm witness groups whole rotation pairs, so a
// wrong guess here would silently break the certificate, hence the closed list.
#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/model/model_loader.h"
#include "engine/model/rope_scaling.h"

namespace witcert {

const char* RopePairingName(RopePairing pairing) {
  switch (pairing) {
    case RopePairing::kInterleaved:
      return "interleaved";
    case RopePairing::kHalfSplit:
      return "half-split";
  }
  return "unknown";
}

namespace {

// A required positive integer that fits int32. Missing → InvalidArgument naming the key.
absl::StatusOr<int32_t> RequirePositiveInt(const GgufFile& file, const std::string& key) {
  absl::StatusOr<int64_t> v = file.GetInt(key);
  if (absl::IsNotFound(v.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": required metadata key '", key, "' is missing"));
  }
  if (!v.ok()) return v.status();
  if (*v <= 0 || *v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": metadata key '", key, "' = ", *v, " is not a positive int32"));
  }
  return static_cast<int32_t>(*v);
}

// An optional positive int32; `fallback` when absent.
absl::StatusOr<int32_t> OptionalPositiveInt(const GgufFile& file, const std::string& key,
                                            int32_t fallback) {
  if (file.Find(key) == nullptr) return fallback;
  return RequirePositiveInt(file, key);
}

// An optional positive finite float; `fallback` when absent.
absl::StatusOr<float> OptionalPositiveFloat(const GgufFile& file, const std::string& key,
                                            float fallback) {
  if (file.Find(key) == nullptr) return fallback;
  ASSIGN_OR_RETURN(double v, file.GetFloat(key));
  if (!(v > 0.0) || !std::isfinite(static_cast<float>(v))) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": metadata key '", key, "' = ", v,
                                                   " is not a positive finite float"));
  }
  return static_cast<float>(v);
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& c) {
  if (c.num_layers <= 0 || c.hidden_dim <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.head_dim <= 0 || c.ffn_dim <= 0 || c.vocab_size <= 0 || c.context_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config has a non-positive dimension: layers=", c.num_layers,
                     " hidden=", c.hidden_dim, " heads=", c.num_heads, " kv_heads=", c.num_kv_heads,
                     " head_dim=", c.head_dim, " ffn=", c.ffn_dim, " vocab=", c.vocab_size,
                     " context=", c.context_length));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head count ", c.num_heads, " is not a multiple of the KV head count ", c.num_kv_heads));
  }
  if (c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", c.head_dim, " is odd; RoPE needs whole pairs"));
  }
  if (int64_t{c.num_heads} * c.head_dim > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("num_heads * head_dim overflows int32");
  }
  if (!(c.rms_norm_eps > 0.0f) || !(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta)) {
    return absl::InvalidArgumentError("rms_norm_eps and rope_theta must be positive");
  }
  RETURN_IF_ERROR(ValidateRopeAttnFactor(c.rope_attn_factor));
  return ValidateRopeFactors(c.rope_freq_factors, c.head_dim);
}

absl::StatusOr<ModelConfig> ReadGgufModelConfig(const GgufFile& file) {
  absl::StatusOr<std::string_view> arch = file.GetString("general.architecture");
  if (!arch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": metadata key 'general.architecture' is missing or not a string"));
  }
  ModelConfig c;
  c.architecture = std::string(*arch);
  if (c.architecture == "llama") {
    c.rope_pairing = RopePairing::kInterleaved;
    c.qkv_bias = false;
  } else if (c.architecture == "qwen2") {
    c.rope_pairing = RopePairing::kHalfSplit;
    c.qkv_bias = true;
  } else if (c.architecture == "qwen3") {  // qwen2 without QKV biases, with per-head q/k RMSNorm
    c.rope_pairing = RopePairing::kHalfSplit;
    c.qk_norm = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": unsupported architecture '",
                                                   c.architecture, "' (supported: llama, qwen2, qwen3)"));
  }
  if (absl::StatusOr<std::string_view> name = file.GetString("general.name"); name.ok()) {
    c.name = std::string(*name);
  }
  const std::string p = c.architecture + ".";
  ASSIGN_OR_RETURN(c.num_layers, RequirePositiveInt(file, p + "block_count"));
  ASSIGN_OR_RETURN(c.hidden_dim, RequirePositiveInt(file, p + "embedding_length"));
  ASSIGN_OR_RETURN(c.num_heads, RequirePositiveInt(file, p + "attention.head_count"));
  ASSIGN_OR_RETURN(c.num_kv_heads,
                   OptionalPositiveInt(file, p + "attention.head_count_kv", c.num_heads));
  ASSIGN_OR_RETURN(c.ffn_dim, RequirePositiveInt(file, p + "feed_forward_length"));
  ASSIGN_OR_RETURN(c.context_length, RequirePositiveInt(file, p + "context_length"));
  ASSIGN_OR_RETURN(c.rope_theta, OptionalPositiveFloat(file, p + "rope.freq_base", 10000.0f));
  ASSIGN_OR_RETURN(c.rms_norm_eps,
                   OptionalPositiveFloat(file, p + "attention.layer_norm_rms_epsilon", 1e-5f));

  // The head size: attention.key_length where the file states it (Mistral Nemo: 128 with
  // embedding_length 5120 over 32 heads), else embedding_length / head_count. Values must have
  // the keys' size: the forward pass has one head_dim.
  if (file.Find(p + "attention.key_length") != nullptr) {
    ASSIGN_OR_RETURN(c.head_dim, RequirePositiveInt(file, p + "attention.key_length"));
    ASSIGN_OR_RETURN(int32_t value_length,
                     OptionalPositiveInt(file, p + "attention.value_length", c.head_dim));
    if (value_length != c.head_dim) {
      return absl::UnimplementedError(absl::StrCat(
          file.path(), ": attention.value_length ", value_length, " differs from attention.key_length ",
          c.head_dim, " (separate key and value head sizes are not supported)"));
    }
  } else if (c.hidden_dim % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": embedding_length ", c.hidden_dim,
                                                   " is not a multiple of head_count ",
                                                   c.num_heads, " and there is no attention.key_length"));
  } else {
    c.head_dim = c.hidden_dim / c.num_heads;
  }
  ASSIGN_OR_RETURN(int32_t rope_dim,
                   OptionalPositiveInt(file, p + "rope.dimension_count", c.head_dim));
  if (rope_dim != c.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": metadata key '", p, "rope.dimension_count' = ", rope_dim,
        " differs from head_dim ", c.head_dim, " (partial rotary embeddings are unsupported)"));
  }
  // RoPE scaling in metadata: "linear" (rope.scaling.type with rope.scaling.factor, or the older
  // rope.scale_linear) becomes one factor per pair; "yarn" (Qwen2.5 / Qwen3 long-context
  // conversions) its ramped factors and attention factor, with ggml's keys and defaults
  // (original_context_length → context_length, yarn_beta_fast 32, yarn_beta_slow 1,
  // yarn_ext_factor 1 when absent or negative, yarn_attn_factor multiplying 1 + 0.1·ln(factor),
  // which applies only while the ext factor is non-zero). Llama 3.1+ files carry their llama3
  // factors as the rope_freqs tensor instead, which the weights loader composes with these
  // (model.cc). Other scalings are refused rather than run as a different model.
  if (file.Find(p + "rope.scaling.type") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view type, file.GetString(p + "rope.scaling.type"));
    absl::Status made = absl::OkStatus();
    if (type == "linear") {
      ASSIGN_OR_RETURN(float factor, OptionalPositiveFloat(file, p + "rope.scaling.factor", 0.0f));
      made = LinearRopeFactors(factor, c.head_dim, &c.rope_freq_factors);
    } else if (type == "yarn") {
      // Keys that change more than this arithmetic (DeepSeek's log multiplier, per-model attention
      // factors) are refused when they would change anything.
      constexpr std::pair<const char*, double> kRefusedUnlessNeutral[] = {
          {"rope.scaling.yarn_log_multiplier", 0.0}, {"rope.scaling.attn_factor", 1.0}};
      for (const auto& [key, neutral] : kRefusedUnlessNeutral) {
        if (file.Find(p + key) == nullptr) continue;
        ASSIGN_OR_RETURN(double v, file.GetFloat(p + key));
        if (v != neutral) {
          return absl::UnimplementedError(absl::StrCat(file.path(), ": metadata key '", p, key, "' = ", v,
                                                       " is not supported with yarn (only ", neutral, ")"));
        }
      }
      YarnRopeScaling y;
      ASSIGN_OR_RETURN(y.factor, OptionalPositiveFloat(file, p + "rope.scaling.factor", 0.0f));
      ASSIGN_OR_RETURN(int32_t original, OptionalPositiveInt(file, p + "rope.scaling.original_context_length",
                                                             c.context_length));
      y.original_context = original;
      ASSIGN_OR_RETURN(y.beta_fast, OptionalPositiveFloat(file, p + "rope.scaling.yarn_beta_fast", 32.0f));
      ASSIGN_OR_RETURN(y.beta_slow, OptionalPositiveFloat(file, p + "rope.scaling.yarn_beta_slow", 1.0f));
      if (file.Find(p + "rope.scaling.yarn_ext_factor") != nullptr) {
        ASSIGN_OR_RETURN(double ext, file.GetFloat(p + "rope.scaling.yarn_ext_factor"));
        if (ext >= 0.0) y.extrapolation = ext;  // negative: unset
      }
      ASSIGN_OR_RETURN(float attn, OptionalPositiveFloat(file, p + "rope.scaling.yarn_attn_factor", 1.0f));
      made = YarnRopeFactors(y, c.rope_theta, c.head_dim, &c.rope_freq_factors);
      c.rope_attn_factor =
          static_cast<float>(attn * (y.extrapolation != 0.0 ? YarnAttentionFactor(y.factor) : 1.0));
      if (made.ok()) c.context_length = YarnContextLength(y, c.context_length);
    } else if (type != "none") {
      return absl::UnimplementedError(absl::StrCat(
          file.path(), ": metadata key '", p, "rope.scaling.type' = '", std::string(type),
          "' is not supported (none, linear, yarn, and llama3 factors in the rope_freqs tensor are)"));
    }
    if (!made.ok()) return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", made.message()));
    DropIdentityRopeScaling(c.rope_attn_factor, &c.rope_freq_factors);
  } else if (file.Find(p + "rope.scale_linear") != nullptr) {
    ASSIGN_OR_RETURN(double factor, file.GetFloat(p + "rope.scale_linear"));
    if (factor != 1.0) {
      if (absl::Status s = LinearRopeFactors(factor, c.head_dim, &c.rope_freq_factors); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", s.message()));
      }
    }
  }

  // Vocabulary: explicit key, else the tokenizer's token list, else the embedding rows.
  if (file.Find(p + "vocab_size") != nullptr) {
    ASSIGN_OR_RETURN(c.vocab_size, RequirePositiveInt(file, p + "vocab_size"));
  } else if (auto tokens = file.GetStringArray("tokenizer.ggml.tokens"); tokens.ok()) {
    if (tokens->empty() ||
        tokens->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": 'tokenizer.ggml.tokens' has unusable length ", tokens->size()));
    }
    c.vocab_size = static_cast<int32_t>(tokens->size());
  } else if (const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
             embd != nullptr && embd->shape.size() == 2 &&
             embd->shape[1] <= std::numeric_limits<int32_t>::max()) {
    c.vocab_size = static_cast<int32_t>(embd->shape[1]);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": cannot determine the vocabulary size (no '", p,
                     "vocab_size', no 'tokenizer.ggml.tokens', no 2-D 'token_embd.weight')"));
  }

  if (absl::Status s = ValidateModelConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", s.message()));
  }
  return c;
}

}  // namespace witcert
