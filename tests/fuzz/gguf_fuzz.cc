// libFuzzer entry point for the GGUF reader and the model binder.
//
// Any input must end in a status, never a crash, a hang or an out-of-bounds read. Accepted
// inputs have every tensor's first and last byte read, so a size or offset the parser
// wrongly accepted shows up under AddressSanitizer.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/model/gguf.h"
#include "engine/model/model_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file =
      witcert::GgufFile::FromBytes(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const witcert::GgufTensorInfo& t : (*file)->tensors()) {
    if (t.size_bytes > 0) sink = sink + t.data[0] + t.data[t.size_bytes - 1];
  }
  for (const std::string& key : (*file)->metadata_keys()) {
    const witcert::GgufValue* v = (*file)->Find(key);
    for (std::string_view s : v->string_array) {
      if (!s.empty()) sink = sink + static_cast<uint8_t>(s.back());
    }
  }
  auto model = witcert::ModelLoader::FromGguf(std::move(*file));
  (void)model;
  return 0;
}
