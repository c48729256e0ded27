// Brings up a runnable engine from an EngineConfig: model, tokenizer, chat template, backend
// and the engine loop, owned together so their lifetimes cannot be mixed up.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/cert/records.h"
#include "engine/model/model.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_config.h"
#include "engine/runtime/sampling_params.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace witcert {

struct LoadedEngine {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ChatTemplate chat_template;
  // What a request's unset sampling fields take: the checkpoint's generation_config.json (HF
  // folders), else SamplingParams{} (engine/runtime/generation_defaults.h).
  SamplingParams sampling_defaults;
  std::unique_ptr<TraceWriter> trace;  // when config.trace_path is set
  std::unique_ptr<Engine> engine;  // declared last: destroyed first
};

// `progress` (may be empty) receives human-readable loading steps.
absl::StatusOr<std::unique_ptr<LoadedEngine>> LoadEngine(
    const EngineConfig& config, const std::function<void(const std::string&)>& progress = {});

// KV options for a model and a KV config: the pool's block count comes from memory_bytes.
absl::StatusOr<KvCacheOptions> MakeKvOptions(const ModelConfig& model, const KvConfig& kv);

}  // namespace witcert
