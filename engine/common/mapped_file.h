// Read-only memory mapping of a whole file, shared by the model-file readers (GGUF,
// safetensors): weights stay in the page cache and are never copied.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace witcert {

struct FileMapping {
  void* data = nullptr;  // nullptr for an empty file
  size_t size = 0;
};

// Maps `path` read-only. Errors name the path: NotFound / PermissionDenied (from errno),
// InvalidArgument for something that is not a regular file. The caller munmaps `data`.
absl::StatusOr<FileMapping> MapFileReadOnly(const std::string& path);

}  // namespace witcert
