// safetensors reader: one mmap'd file, or the set of shards a Hugging Face folder holds.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON mapping tensor names to
// {dtype, shape, data_offsets: [begin, end]} (offsets relative to the data section that
// starts at 8 + N) plus an optional "__metadata__" string map, then the raw tensor bytes.
// Every field is checked before use (header within the file, offsets within the data
// section, byte size = product(shape) · dtype size without overflow, no two tensors
// overlapping), so a corrupt file is an InvalidArgument/DataLoss naming the file and the
// tensor, never a crash. Tensor bytes stay in the mapping; views live as long as the file.
//
// Every dtype of the format is parsed (so foreign tensors such as integer buffers do not
// stop a checkpoint from opening); only F32, F16 and BF16 can be bound as weights, which
// RequireFloat checks with an error naming the tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/common/mapped_file.h"

namespace witcert {

enum class SafetensorsDtype {
  kF32, kF16, kBF16,  // bindable as weights
  kF64, kI64, kI32, kI16, kI8, kU64, kU32, kU16, kU8, kBool, kF8E4M3, kF8E5M2,
};

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
size_t SafetensorsDtypeSize(SafetensorsDtype dtype);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;     // row-major, outermost first (torch order)
  const uint8_t* data = nullptr;  // into the mapping, validated in bounds
  uint64_t size_bytes = 0;
  const std::string* path = nullptr;  // the file it lives in (for messages)
  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  // Maps and parses `path`. NotFound/PermissionDenied when it cannot be opened,
  // InvalidArgument/DataLoss naming the file (and tensor) when it is malformed.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses an in-memory image (bytes copied); `name` stands in for the path in messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string_view bytes,
                                                                     std::string name);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;
  const absl::flat_hash_map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile(std::string path, FileBytes bytes)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}
  // Takes the bytes, then parses them.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Load(std::string path, FileBytes bytes);
  absl::Status Parse();

  std::string path_;
  FileBytes bytes_;
  std::vector<SafetensorsTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> index_;
  absl::flat_hash_map<std::string, std::string> metadata_;
};

// The shards of a checkpoint folder, looked up by tensor name.
//
// Which files: model.safetensors.index.json's weight_map when present (every shard it
// names must exist and hold the tensors mapped to it), else model.safetensors, else every
// *.safetensors in the folder (a name found in two shards is an error).
class SafetensorsSet {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsSet>> OpenFolder(const std::string& folder);

  const SafetensorsTensor* Find(std::string_view name) const;
  size_t num_tensors() const { return by_name_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::string& folder() const { return folder_; }

 private:
  absl::Status AddFile(std::unique_ptr<SafetensorsFile> file);

  std::string folder_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  absl::flat_hash_map<std::string, const SafetensorsTensor*> by_name_;
};

// `t` has a dtype the CPU matmul reads (F32, F16, BF16); else InvalidArgument naming it.
absl::Status RequireFloat(const SafetensorsTensor& t);

}  // namespace witcert
