// A whole file's bytes, read-only, shared by the model-file readers (GGUF, safetensors): a
// memory mapping, so weights stay in the page cache and are never copied, or an owned copy of
// an in-memory image (tests and fuzz targets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace witcert {

class FileBytes {
 public:
  // Maps `path` read-only. Errors name the path: NotFound / PermissionDenied (from errno),
  // InvalidArgument for something that is not a regular file.
  static absl::StatusOr<FileBytes> Map(const std::string& path);
  // A copy of `bytes`.
  static FileBytes Copy(std::string_view bytes);

  FileBytes() = default;
  FileBytes(FileBytes&& other) noexcept;
  FileBytes& operator=(FileBytes&& other) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();  // unmaps

  // Valid while this object lives and is not moved from (an owned copy's address moves with it).
  const uint8_t* data() const;
  size_t size() const { return size_; }

 private:
  void* mapping_ = nullptr;  // nullptr for a copy or an empty file
  size_t size_ = 0;
  std::string owned_;        // Copy's bytes
};

}  // namespace witcert
