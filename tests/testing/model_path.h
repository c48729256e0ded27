// Where tests find the real default model, and what they do when it is absent.
//
// Tests that need the model call RequireModelOrSkip(): absent file → GTEST_SKIP, unless
// WITCERT_REQUIRE_MODEL=1 (set by scripts/test.sh and CI), where absence is a failure.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace witcert::testing {

inline std::string DefaultModelPath() {
  const char* env = std::getenv("WITCERT_MODEL");
  return env && *env ? env : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline bool ModelRequired() {
  const char* env = std::getenv("WITCERT_REQUIRE_MODEL");
  return env && std::string(env) == "1";
}

}  // namespace witcert::testing

// Use at the top of a TEST body.
#define WITCERT_REQUIRE_MODEL_OR_SKIP()                                                 \
  do {                                                                                  \
    if (!std::filesystem::exists(::witcert::testing::DefaultModelPath())) {             \
      if (::witcert::testing::ModelRequired())                                          \
        FAIL() << "model missing: " << ::witcert::testing::DefaultModelPath();          \
      GTEST_SKIP() << "model not fetched (scripts/fetch_model.sh)";                    \
    }                                                                                   \
  } while (0)
