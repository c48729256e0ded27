// Everything needed to bring up an engine, as one value the CLI flags and the config file
// both fill in (server/config parses the file; flags override it).
#pragma once

#include <cstdint>
#include <string>

#include "engine/gate/gate_policy.h"
#include "engine/runtime/scheduler.h"

namespace witcert {

struct KvConfig {
  std::string k_scheme = "fp16";
  std::string v_scheme = "fp16";
  int32_t block_size = 16;
  int64_t memory_bytes = 256ll << 20;    // quantized pool size; sets the number of blocks
  int32_t num_bands = 8;
  int32_t outlier_channels = 0;
  uint64_t dither_seed = 0x5eedc0de;
  int64_t backing_store_bytes = 1ll << 30;
  // Reuse the KV blocks of prompt prefixes already computed (CPU backend; see KvCacheOptions).
  bool prefix_caching = true;
};

struct EngineConfig {
  std::string model_path;
  std::string chat_template;   // "" → from the model's metadata; a ChatTemplate::FromName name
  // "cuda" | "cpu" | "auto" (cuda when the build has the CUDA backend and a GPU is present).
  std::string device = "auto";
  int32_t threads = 0;         // 0 → all cores
  int32_t max_context = 0;     // 0 → the model's context length
  // RoPE scaling replacing the model's, as config.json's rope_scaling object (JSON text, e.g.
  // {"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}); "" → the
  // model's own.
  std::string rope_scaling;
  // Unset sampling fields take the checkpoint's recommended values (generation_config.json,
  // GGUF general.sampling.*) when true, the built-in SamplingParams{} otherwise (vLLM's
  // --generation-config auto | vllm).
  bool model_sampling_defaults = true;
  // Reference arithmetic (dequantized weights, double accumulation): slow; for verifying
  // the fast path against an exact evaluation.
  bool exact_matmul = false;
  // JSONL trace of every certificate cell (one line per cell), for offline analysis; "" → off.
  std::string trace_path;
  KvConfig kv;
  GatePolicy gate{.mode = GateMode::kObserve, .tv_threshold = 0.05f, .delta_req = 0.01};
  // max_batched_tokens 0 → the backend's DefaultBatchedTokens (CPU 512, CUDA 2048).
  SchedulerOptions scheduler{.max_batched_tokens = 0};
};

}  // namespace witcert
