// GGUF (v2, v3) reader: header, metadata and tensor table over an mmap'd file.
//
// Every count, length, offset and size read from the file is checked against the file's
// size before it is used, so a truncated or corrupt file yields an InvalidArgument /
// DataLoss status naming the problem (key, tensor, byte offset), never a crash. Tensor data
// stays in the mapping; views returned here live as long as the GgufFile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/common/mapped_file.h"
#include "kernels/ggml_type.h"

namespace witcert {

// GGUF metadata value types, numbered as in the specification.
enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

// One metadata value. Arrays hold a homogeneous element type; string arrays (vocabularies,
// merges) are stored as string_views into the mapping to avoid copying 50k strings.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType array_type = GgufValueType::kUint8;  // when type == kArray
  std::variant<uint64_t, int64_t, double, bool, std::string_view> scalar;
  std::vector<std::string_view> string_array;  // array of kString
  std::vector<double> number_array;            // array of any numeric or bool type
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> shape;  // GGUF order: shape[0] (ne0) is the contiguous dimension
  uint64_t offset = 0;         // from the start of the data section
  uint64_t size_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping, validated in bounds
  int64_t num_elements() const;
};

class GgufFile {
 public:
  // Maps and parses `path`. Errors: NotFound (no file), InvalidArgument (not GGUF, bad
  // version), DataLoss (truncated/corrupt: names what is out of bounds).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (the fuzz target and tests use this). The bytes are copied.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string_view bytes);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }

  const GgufValue* Find(std::string_view key) const;
  // Typed getters: NotFound when absent, InvalidArgument when of another type. Integer
  // getters accept any integer type whose value fits.
  absl::StatusOr<std::string_view> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // any numeric type
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<absl::Span<const std::string_view>> GetStringArray(std::string_view key) const;
  absl::StatusOr<absl::Span<const double>> GetNumberArray(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  std::vector<std::string> metadata_keys() const;

 private:
  GgufFile(std::string path, FileBytes bytes)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}
  // Takes the bytes, then parses them.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Load(std::string path, FileBytes bytes);
  absl::Status Parse();

  std::string path_;
  FileBytes bytes_;
  uint32_t version_ = 0;
  absl::flat_hash_map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace witcert
