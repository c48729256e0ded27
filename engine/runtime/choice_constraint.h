// vLLM's guided_choice: the output is exactly one of a few given strings.
//
// A token is allowed when the output so far followed by its bytes is a prefix of some choice;
// end-of-generation is allowed exactly when the output equals a choice (a choice that is a
// prefix of a longer one may end or go on). Special tokens, having no bytes, never are.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/token_bytes.h"

namespace witcert {

// allowed [vocab] for `output` (the bytes generated so far) under `choices`.
void ChoiceAllowed(const std::vector<std::string>& choices, std::string_view output,
                   const TokenByteTable& tokens, std::vector<uint8_t>* allowed);

// The output is one of the choices.
bool ChoiceComplete(const std::vector<std::string>& choices, std::string_view output);

}  // namespace witcert
