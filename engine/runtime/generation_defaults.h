// A checkpoint's recommended sampling, used for the fields a request leaves unset, as vLLM (for
// Hugging Face folders' generation_config.json) and llama.cpp (for GGUF's general.sampling.*
// keys) do: temperature, top_p, top_k, min_p and repetition_penalty. Other keys (do_sample,
// max_new_tokens, token ids, mirostat) are not sampling defaults here.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/runtime/sampling_params.h"

namespace witcert {

// generation_config.json text → defaults over SamplingParams{}. InvalidArgument (naming the key)
// for a value outside what a request may ask for; "" → SamplingParams{}.
absl::StatusOr<SamplingParams> GenerationDefaultsFromJson(std::string_view json_text, std::string_view where);

// A GGUF's general.sampling.temp / top_p / top_k / min_p / penalty_repeat → defaults over
// SamplingParams{}; InvalidArgument naming the key for a value out of range.
absl::StatusOr<SamplingParams> GenerationDefaultsFromGguf(const GgufFile& file);

}  // namespace witcert
