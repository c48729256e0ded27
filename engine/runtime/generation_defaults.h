// A checkpoint's recommended sampling (Hugging Face generation_config.json), used for the
// fields a request leaves unset, as vLLM does by default: temperature, top_p, top_k, min_p and
// repetition_penalty. Other keys (do_sample, max_new_tokens, token ids) are not sampling
// defaults here.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/runtime/sampling_params.h"

namespace witcert {

// generation_config.json text → defaults over SamplingParams{}. InvalidArgument (naming the key)
// for a value outside what a request may ask for; "" → SamplingParams{}.
absl::StatusOr<SamplingParams> GenerationDefaultsFromJson(std::string_view json_text, std::string_view where);

}  // namespace witcert
