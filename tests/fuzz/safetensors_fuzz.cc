// libFuzzer entry point for the safetensors reader: any bytes must end in a status
// (SafetensorsFile::FromBytes) naming what is wrong; a parsed file's every tensor must lie inside
// the image with size = elements × dtype size, read here end to end (ASan guards the copy's
// bounds); never a crash, an exception or undefined behaviour that ASan or UBSan detects.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/model/safetensors.h"
#include "tests/testing/fuzz_check.h"

using witcert::testing::FuzzCheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto file = witcert::SafetensorsFile::FromBytes(bytes, "fuzz.safetensors");
  if (!file.ok()) {
    FuzzCheck(!file.status().message().empty());  // an error always says what is wrong
    return 0;
  }
  uint64_t checksum = 0;
  for (const witcert::SafetensorsTensor& t : (*file)->tensors()) {
    FuzzCheck(t.num_elements() >= 0);
    FuzzCheck(t.size_bytes == static_cast<uint64_t>(t.num_elements()) * witcert::SafetensorsDtypeSize(t.dtype));
    FuzzCheck((*file)->Find(t.name) != nullptr);
    for (uint64_t i = 0; i < t.size_bytes; ++i) checksum += t.data[i];
  }
  return checksum == 0xFFFFFFFFFFFFFFFFull ? 1 : 0;  // keeps the reads
}
