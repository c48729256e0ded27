#include "engine/runtime/loaded_engine.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "engine/backend/cpu/cpu_backend.h"
#ifdef WITCERT_HAVE_CUDA_BACKEND
#include "engine/backend/cuda/cuda_backend.h"
#endif
#include "engine/common/status.h"
#include "engine/model/model_source.h"
#include "engine/runtime/generation_defaults.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/synthetic_tokenizer.h"

namespace witcert {

absl::StatusOr<KvCacheOptions> MakeKvOptions(const ModelConfig& model, const KvConfig& kv) {
  KvCacheOptions options = KvCacheOptionsFor(model);
  options.block_size = kv.block_size;
  options.k_scheme = kv.k_scheme;
  options.v_scheme = kv.v_scheme;
  options.num_bands = kv.num_bands;
  options.outlier_channels = kv.outlier_channels;
  options.dither_seed = kv.dither_seed;
  options.backing_store_bytes = kv.backing_store_bytes;
  options.prefix_caching = kv.prefix_caching;
  options.num_blocks = 1;
  ASSIGN_OR_RETURN(const int64_t bytes_per_token, KvCache::BytesPerTokenFor(options));
  const int64_t bytes_per_block = bytes_per_token * kv.block_size;
  options.num_blocks = kv.memory_bytes / bytes_per_block;
  if (options.num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kv.memory_bytes = %d cannot hold one block of %d bytes", kv.memory_bytes,
        bytes_per_block));
  }
  return options;
}

namespace {

// --device: cuda | cpu | auto (cuda when this build has the CUDA backend and a GPU is present).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(
    const EngineConfig& config, const Model& model, const KvCacheOptions& kv_options,
    const std::function<void(const std::string&)>& say) {
  if (config.device != "cuda" && config.device != "cpu" && config.device != "auto") {
    return absl::InvalidArgumentError(
        absl::StrFormat("device '%s': expected cuda, cpu or auto", config.device));
  }
#ifdef WITCERT_HAVE_CUDA_BACKEND
  // The GPU backend runs every gate mode (repair: engine/backend/cuda/cuda_gate_repair.cc).
  if (config.device == "cuda" || (config.device == "auto" && CudaBackend::DeviceAvailable())) {
    // Prefix caching on the GPU: a hit's prompt rows read the cached prefix as stored (the
    // quantized pool, metered like a later prompt chunk), not exact as on the CPU backend.
    auto gpu = CudaBackend::Create(model, kv_options, CudaBackend::Options{.progress = say});
    if (gpu.ok()) return std::unique_ptr<Backend>(std::move(*gpu));
    // auto: a model or KV scheme the GPU path does not support yet runs on the CPU.
    if (config.device == "cuda" || gpu.status().code() != absl::StatusCode::kUnimplemented) {
      return gpu.status();
    }
    say(absl::StrFormat("cuda backend unavailable (%s); using the cpu backend",
                        gpu.status().message()));
  }
#else
  if (config.device == "cuda") {
    return absl::FailedPreconditionError("--device cuda: this build has no CUDA backend");
  }
#endif
  ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu,
                   CpuBackend::Create(model, kv_options,
                                      CpuBackend::Options{.num_threads = config.threads,
                                                          .exact_matmul = config.exact_matmul}));
  return std::unique_ptr<Backend>(std::move(cpu));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoadedEngine>> LoadEngine(
    const EngineConfig& config, const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  auto loaded = std::make_unique<LoadedEngine>();
  const auto start = std::chrono::steady_clock::now();
  say(absl::StrFormat("loading model %s ...", config.model_path));
  ASSIGN_OR_RETURN(const ModelSpec spec, ParseModelSpec(config.model_path));
  ASSIGN_OR_RETURN(loaded->model, LoadModel(spec, say));
  if (!config.rope_scaling.empty()) {
    RETURN_IF_ERROR(loaded->model->OverrideRopeScaling(config.rope_scaling, "model.rope_scaling"));
    const ModelConfig& scaled = loaded->model->config();
    say(absl::StrFormat("rope scaling from the configuration: %s (context %d tokens, attention factor %.6g)",
                        config.rope_scaling, scaled.context_length, scaled.rope_attn_factor));
  }
  const ModelConfig& mc = loaded->model->config();
  say(absl::StrFormat("model: %s (%s, %d layers, hidden %d, %d/%d heads, vocab %d)", mc.name,
                      mc.architecture, mc.num_layers, mc.hidden_dim, mc.num_heads,
                      mc.num_kv_heads, mc.vocab_size));
  switch (spec.kind) {
    case ModelSourceKind::kGguf: {
      ASSIGN_OR_RETURN(loaded->tokenizer, Tokenizer::FromGguf(*loaded->model->gguf()));
      ASSIGN_OR_RETURN(loaded->chat_template,
                       ChatTemplate::FromGguf(*loaded->model->gguf(), config.chat_template));
      ASSIGN_OR_RETURN(loaded->sampling_defaults, GenerationDefaultsFromGguf(*loaded->model->gguf()));
      break;
    }
    case ModelSourceKind::kHuggingFace: {
      ASSIGN_OR_RETURN(loaded->tokenizer, LoadHfTokenizer(spec.path));
      ASSIGN_OR_RETURN(const std::string source, ReadHfChatTemplate(spec.path));
      ASSIGN_OR_RETURN(loaded->chat_template,
                       ChatTemplate::FromTemplateText(source, config.chat_template));
      ASSIGN_OR_RETURN(const std::string generation_config, ReadHfGenerationConfig(spec.path));
      ASSIGN_OR_RETURN(loaded->sampling_defaults,
                       GenerationDefaultsFromJson(generation_config, spec.path + "/generation_config.json"));
      break;
    }
    case ModelSourceKind::kSynthetic: {
      ASSIGN_OR_RETURN(loaded->tokenizer, MakeSyntheticTokenizer(mc.vocab_size));
      ASSIGN_OR_RETURN(loaded->chat_template,
                       ChatTemplate::FromName(config.chat_template.empty()
                                                  ? std::string("chatml")
                                                  : config.chat_template));
      break;
    }
  }
  if (!config.model_sampling_defaults) loaded->sampling_defaults = SamplingParams{};
  if (const SamplingParams& d = loaded->sampling_defaults; d.temperature != SamplingParams{}.temperature ||
      d.top_p != 1.0f || d.top_k != 0 || d.min_p != 0.0f || d.repetition_penalty != 1.0f) {
    say(absl::StrFormat("the model's sampling defaults (for fields requests leave unset): temperature %g, "
                        "top_p %g, top_k %d, min_p %g, repetition_penalty %g",
                        d.temperature, d.top_p, d.top_k, d.min_p, d.repetition_penalty));
  }
  ASSIGN_OR_RETURN(KvCacheOptions kv_options, MakeKvOptions(mc, config.kv));
  kv_options.exact_cache_blocks = config.gate.exact_cache_blocks;
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                   MakeBackend(config, *loaded->model, kv_options, say));
  say(absl::StrFormat("backend %s; kv cache: K %s, V %s, %d blocks of %d tokens (%d tokens), "
                      "gate %s",
                      backend->name(), config.kv.k_scheme, config.kv.v_scheme,
                      kv_options.num_blocks,
                      kv_options.block_size, kv_options.num_blocks * kv_options.block_size,
                      GateModeName(config.gate.mode)));
  EngineOptions options;
  options.scheduler = config.scheduler;
  if (options.scheduler.max_batched_tokens <= 0) {
    options.scheduler.max_batched_tokens = backend->DefaultBatchedTokens();
  }
  options.gate = config.gate;
  options.max_context = config.max_context;
  if (!config.trace_path.empty()) {
    RETURN_IF_ERROR(TraceWriter::Open(config.trace_path, &loaded->trace));
    options.trace = loaded->trace.get();
    say(absl::StrFormat("certificate trace: %s", config.trace_path));
  }
  loaded->engine = std::make_unique<Engine>(std::move(backend), *loaded->tokenizer, options);
  say(absl::StrFormat("ready in %.2f s",
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                          .count()));
  return loaded;
}

}  // namespace witcert
