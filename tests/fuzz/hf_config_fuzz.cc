// libFuzzer entry point for the Hugging Face config.json reader: any bytes must end in a status
// (ParseHfConfig), and a parsed config must survive ApplyRopeScalingJson with the same bytes as
// an operator's rope_scaling override; never a crash, an exception or undefined behaviour that
// ASan or UBSan detects.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/model/hf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = witcert::ParseHfConfig(text, "fuzz/config.json");
  if (!config.ok()) {
    if (config.status().message().empty()) std::abort();  // an error always says what is wrong
    return 0;
  }
  if (!(config->num_layers > 0 && config->hidden_dim > 0 && config->vocab_size > 0)) std::abort();
  witcert::ModelConfig copy = *config;
  (void)witcert::ApplyRopeScalingJson(text, "fuzz/override", &copy);
  return 0;
}
