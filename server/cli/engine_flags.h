// Flags shared by every subcommand that runs the engine (generate, chat, serve), and where
// the default model is found.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "engine/runtime/engine_config.h"
#include "server/cli/args.h"

namespace witcert::cli {

inline constexpr char kDefaultModelFile[] = "SmolLM2-135M-Instruct.Q4_1.gguf";

void DeclareEngineFlags(Args& args);
// Applies the flags given on the command line on top of `config` (config-file values stay
// unless a flag overrides them).
absl::Status ApplyEngineFlags(const Args& args, EngineConfig* config);
// The default model: $WITCERT_MODEL, ./models/<default>, or <exe>/../../models/<default>.
std::string DefaultModelPath();

}  // namespace witcert::cli
