// GGUF reader. The file is untrusted input: every field read goes through ByteReader,
// which checks the remaining length before touching a byte, and every count is checked
// against what the rest of the file could possibly hold before anything is allocated for
// it. Error classes:
//   InvalidArgument: well-formed bytes we do not accept (not GGUF, version 1 or unknown,
//                    big-endian, unknown ggml type, bad general.alignment).
//   DataLoss:        the bytes contradict themselves or the file size (truncation, absurd
//                    counts, bad n_dims/dims, duplicate names, out-of-bounds tensor data).
// Every message names the file, the key or tensor concerned, and the byte offset.
#include "engine/model/gguf.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/mapped_file.h"
#include "engine/common/status.h"

namespace witcert {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kMaxDims = 4;
constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxArrayNesting = 8;  // arrays of arrays deeper than this are rejected

// Encoded size of a fixed-size value type; 0 for string and array.
size_t FixedSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

// Abseil here is built with its own string_view type; bridge std::string_view into it.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// Bounds-checked little-endian cursor over [base, base + size).
class ByteReader {
 public:
  ByteReader(const std::string& path, const uint8_t* base, size_t size)
      : path_(path), base_(base), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  absl::Status Truncated(std::string_view what, size_t at, uint64_t need) const {
    return absl::DataLossError(absl::StrCat(path_, ": truncated reading ", Av(what),
                                            " at byte offset ", at, " (need ", need,
                                            " bytes, file has ", size_, ")"));
  }
  absl::Status Corrupt(std::string_view msg, size_t at) const {
    return absl::DataLossError(absl::StrCat(path_, ": ", Av(msg), " at byte offset ", at));
  }

  template <typename T>
  absl::Status Read(std::string_view what, T* out) {
    if (remaining() < sizeof(T)) return Truncated(what, pos_, sizeof(T));
    std::memcpy(out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status Skip(std::string_view what, uint64_t n) {
    if (remaining() < n) return Truncated(what, pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  // GGUF string: u64 length, then bytes (not NUL-terminated). The view points into the
  // buffer.
  absl::Status ReadString(std::string_view what, std::string_view* out) {
    const size_t at = pos_;
    uint64_t len = 0;
    RETURN_IF_ERROR(Read(what, &len));
    if (len > remaining()) {
      return absl::DataLossError(absl::StrCat(path_, ": ", Av(what), " has length ", len,
                                              " at byte offset ", at, " but only ", remaining(),
                                              " bytes remain"));
    }
    *out = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

// Reads a T from the file and stores it widened to `Stored` (uint64/int64/double/bool).
template <typename T, typename Stored>
absl::Status ReadWidened(ByteReader& r, std::string_view what, GgufValue* value) {
  T v{};
  RETURN_IF_ERROR(r.Read(what, &v));
  value->scalar = static_cast<Stored>(v);
  return absl::OkStatus();
}

// Reads one non-array value of `type` into value->scalar.
absl::Status ReadScalar(ByteReader& r, GgufValueType type, std::string_view what,
                        GgufValue* value) {
  switch (type) {
    case GgufValueType::kUint8:
      return ReadWidened<uint8_t, uint64_t>(r, what, value);
    case GgufValueType::kUint16:
      return ReadWidened<uint16_t, uint64_t>(r, what, value);
    case GgufValueType::kUint32:
      return ReadWidened<uint32_t, uint64_t>(r, what, value);
    case GgufValueType::kUint64:
      return ReadWidened<uint64_t, uint64_t>(r, what, value);
    case GgufValueType::kInt8:
      return ReadWidened<int8_t, int64_t>(r, what, value);
    case GgufValueType::kInt16:
      return ReadWidened<int16_t, int64_t>(r, what, value);
    case GgufValueType::kInt32:
      return ReadWidened<int32_t, int64_t>(r, what, value);
    case GgufValueType::kInt64:
      return ReadWidened<int64_t, int64_t>(r, what, value);
    case GgufValueType::kFloat32:
      return ReadWidened<float, double>(r, what, value);
    case GgufValueType::kFloat64:
      return ReadWidened<double, double>(r, what, value);
    case GgufValueType::kBool:
      return ReadWidened<uint8_t, bool>(r, what, value);  // nonzero = true
    case GgufValueType::kString: {
      std::string_view s;
      RETURN_IF_ERROR(r.ReadString(what, &s));
      value->scalar = s;
      return absl::OkStatus();
    }
    case GgufValueType::kArray:
      break;
  }
  return absl::InternalError("ReadScalar called on an array");
}

double ScalarAsDouble(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.scalar)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v.scalar)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v.scalar)) return *d;
  if (const auto* b = std::get_if<bool>(&v.scalar)) return *b ? 1.0 : 0.0;
  return 0.0;
}

absl::Status ReadArray(ByteReader& r, std::string_view key, int depth, GgufValue* value);

// Skips over an array's elements, bounds-checked (used for arrays nested in arrays, whose
// content no model we load needs).
absl::Status SkipArrayBody(ByteReader& r, std::string_view key, int depth) {
  GgufValue scratch;
  return ReadArray(r, key, depth, &scratch);
}

// Reads an array header (element type, count) and its elements. `depth` counts nesting.
absl::Status ReadArray(ByteReader& r, std::string_view key, int depth, GgufValue* value) {
  const std::string what = absl::StrCat("array '", Av(key), "'");
  if (depth > kMaxArrayNesting) {
    return r.Corrupt(absl::StrCat(Av(what), " nests arrays deeper than ", kMaxArrayNesting),
                     r.pos());
  }
  const size_t at = r.pos();
  uint32_t elem_type = 0;
  uint64_t count = 0;
  RETURN_IF_ERROR(r.Read(what, &elem_type));
  if (!IsKnownValueType(elem_type)) {
    return r.Corrupt(absl::StrCat(Av(what), " has unknown element type ", elem_type), at);
  }
  RETURN_IF_ERROR(r.Read(what, &count));
  const auto type = static_cast<GgufValueType>(elem_type);
  value->type = GgufValueType::kArray;
  value->array_type = type;
  // Smallest encoding of one element: strings need their 8-byte length, arrays their
  // 12-byte header. A count the rest of the file cannot hold is rejected before any
  // allocation, which also rules out count * size overflow.
  const size_t min_elem = type == GgufValueType::kString  ? 8
                          : type == GgufValueType::kArray ? 12
                                                          : FixedSize(type);
  if (count > r.remaining() / min_elem) {
    return r.Corrupt(absl::StrCat(Av(what), " claims ", count, " elements of at least ", min_elem,
                                  " bytes but only ", r.remaining(), " bytes remain"),
                     at + 4);
  }
  if (type == GgufValueType::kString) {
    value->string_array.resize(count);
    for (uint64_t i = 0; i < count; ++i) {
      RETURN_IF_ERROR(r.ReadString(what, &value->string_array[i]));
    }
  } else if (type == GgufValueType::kArray) {
    for (uint64_t i = 0; i < count; ++i) RETURN_IF_ERROR(SkipArrayBody(r, key, depth + 1));
  } else {
    value->number_array.resize(count);
    GgufValue elem;
    for (uint64_t i = 0; i < count; ++i) {
      RETURN_IF_ERROR(ReadScalar(r, type, what, &elem));
      value->number_array[i] = ScalarAsDouble(elem);
    }
  }
  return absl::OkStatus();
}

// Checked a * b for non-negative int64.
bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated not to overflow at parse time
  return n;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(FileBytes bytes, FileBytes::Map(path));
  return Load(path, std::move(bytes));
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string_view bytes) {
  return Load("<memory>", FileBytes::Copy(bytes));
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Load(std::string path, FileBytes bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile(std::move(path), std::move(bytes)));
  RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::Status GgufFile::Parse() {
  ByteReader r(path_, bytes_.data(), bytes_.size());
  uint32_t magic = 0;
  RETURN_IF_ERROR(r.Read("magic", &magic));
  if (magic != kGgufMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": not a GGUF file (bad magic at byte offset 0)"));
  }
  RETURN_IF_ERROR(r.Read("version", &version_));
  if (version_ == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": GGUF version 1 is not supported (re-convert the model; need 2 or 3)"));
  }
  if (version_ != 2 && version_ != 3) {
    // A byte-swapped small version number means a big-endian file.
    const bool swapped = (version_ & 0xFFFF) == 0 && (version_ >> 24) <= 3;
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": unsupported GGUF version ", version_, " at byte offset 4",
                     swapped ? " (big-endian GGUF is not supported)" : " (supported: 2, 3)"));
  }
  uint64_t tensor_count = 0, kv_count = 0;
  RETURN_IF_ERROR(r.Read("tensor count", &tensor_count));
  RETURN_IF_ERROR(r.Read("metadata count", &kv_count));
  // Minimum encodings: a KV is key length (8) + type (4) + a 1-byte value; a tensor info
  // is name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
  if (kv_count > r.remaining() / 13) {
    return r.Corrupt(absl::StrCat("metadata count ", kv_count, " cannot fit in the file"), 16);
  }
  if (tensor_count > r.remaining() / 32) {
    return r.Corrupt(absl::StrCat("tensor count ", tensor_count, " cannot fit in the file"), 8);
  }

  metadata_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const size_t key_at = r.pos();
    std::string_view key;
    RETURN_IF_ERROR(r.ReadString(absl::StrCat("metadata key #", i), &key));
    if (metadata_.contains(Av(key))) {
      return r.Corrupt(absl::StrCat("duplicate metadata key '", Av(key), "'"), key_at);
    }
    const size_t type_at = r.pos();
    uint32_t type = 0;
    RETURN_IF_ERROR(r.Read(absl::StrCat("type of '", Av(key), "'"), &type));
    if (!IsKnownValueType(type)) {
      return r.Corrupt(absl::StrCat("metadata key '", Av(key), "' has unknown value type ", type),
                       type_at);
    }
    GgufValue value;
    value.type = static_cast<GgufValueType>(type);
    if (value.type == GgufValueType::kArray) {
      RETURN_IF_ERROR(ReadArray(r, key, 0, &value));
    } else {
      RETURN_IF_ERROR(ReadScalar(r, value.type, absl::StrCat("value of '", Av(key), "'"), &value));
    }
    metadata_.emplace(std::string(key), std::move(value));
  }

  uint64_t alignment = kDefaultAlignment;
  if (const GgufValue* a = Find("general.alignment"); a != nullptr) {
    const auto* u = std::get_if<uint64_t>(&a->scalar);
    const auto* s = std::get_if<int64_t>(&a->scalar);
    const int64_t v = u != nullptr   ? (*u > (1u << 30) ? -1 : static_cast<int64_t>(*u))
                      : s != nullptr ? *s
                                     : -1;
    if (a->type == GgufValueType::kArray || v <= 0 || v > (1 << 30) || (v & (v - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": metadata key 'general.alignment' must be a power of two integer"));
    }
    alignment = static_cast<uint64_t>(v);
  }

  tensors_.reserve(tensor_count);
  tensor_index_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const size_t info_at = r.pos();
    GgufTensorInfo t;
    std::string_view name;
    RETURN_IF_ERROR(r.ReadString(absl::StrCat("name of tensor #", i), &name));
    t.name = std::string(name);
    if (tensor_index_.contains(t.name)) {
      return r.Corrupt(absl::StrCat("duplicate tensor name '", t.name, "'"), info_at);
    }
    const std::string what = absl::StrCat("tensor '", t.name, "'");
    const size_t dims_at = r.pos();
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(r.Read(what, &n_dims));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return r.Corrupt(
          absl::StrCat(Av(what), " has n_dims ", n_dims, " (must be 1..", kMaxDims, ")"), dims_at);
    }
    int64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const size_t dim_at = r.pos();
      uint64_t dim = 0;
      RETURN_IF_ERROR(r.Read(what, &dim));
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          MulOverflows(elems, static_cast<int64_t>(dim), &elems)) {
        return r.Corrupt(absl::StrCat(Av(what), " has invalid dimension ", d, " = ", dim,
                                      " (zero or element count overflows)"),
                         dim_at);
      }
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const size_t type_at = r.pos();
    uint32_t type = 0;
    RETURN_IF_ERROR(r.Read(what, &type));
    const GgmlTypeInfo* info = GetGgmlTypeInfo(type);
    if (info == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": ", Av(what), " has unknown ggml type ", type, " at byte offset ", type_at));
    }
    t.type = static_cast<GgmlType>(type);
    const size_t offset_at = r.pos();
    RETURN_IF_ERROR(r.Read(what, &t.offset));
    if (t.offset % alignment != 0) {
      return r.Corrupt(absl::StrCat(Av(what), " data offset ", t.offset,
                                    " is not a multiple of the ", alignment, "-byte alignment"),
                       offset_at);
    }
    const size_t row_bytes = GgmlRowBytes(*info, static_cast<size_t>(t.shape[0]));
    if (row_bytes == 0) {
      return r.Corrupt(
          absl::StrCat(Av(what), " of type ", Av(info->name), " has ne0 = ", t.shape[0],
                       ", not a multiple of the block size ", info->block_elems),
          dims_at + 4);
    }
    uint64_t rows = static_cast<uint64_t>(elems / t.shape[0]);
    if (__builtin_mul_overflow(static_cast<uint64_t>(row_bytes), rows, &t.size_bytes)) {
      return r.Corrupt(absl::StrCat(Av(what), " byte size overflows"), dims_at);
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the tensor table.
  const uint64_t table_end = r.pos();
  const uint64_t data_start = (table_end + alignment - 1) / alignment * alignment;
  for (GgufTensorInfo& t : tensors_) {
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_start, t.offset, &begin) ||
        __builtin_add_overflow(begin, t.size_bytes, &end) || end > bytes_.size()) {
      return absl::DataLossError(absl::StrCat(
          path_, ": tensor '", t.name, "' data [", begin, ", +", t.size_bytes, ") at byte offset ",
          data_start, " + ", t.offset, " extends past the end of the file (", bytes_.size(), " bytes)"));
    }
    t.data = bytes_.data() + begin;
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(Av(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
absl::Status NotFoundKey(const std::string& path, std::string_view key) {
  return absl::NotFoundError(absl::StrCat(path, ": metadata key '", Av(key), "' not found"));
}
absl::Status WrongType(const std::string& path, std::string_view key, std::string_view want,
                       const GgufValue& v) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": metadata key '", Av(key), "' is not ",
                                                 Av(want), " (value type ",
                                                 static_cast<uint32_t>(v.type), ")"));
}
}  // namespace

absl::StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path_, key);
  if (v->type != GgufValueType::kString) return WrongType(path_, key, "a string", *v);
  return std::get<std::string_view>(v->scalar);
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path_, key);
  if (const auto* u = std::get_if<uint64_t>(&v->scalar);
      u != nullptr && v->type != GgufValueType::kArray) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": metadata key '", Av(key), "' value ", *u, " does not fit int64"));
    }
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v->scalar);
      i != nullptr && v->type != GgufValueType::kArray) {
    return *i;
  }
  return WrongType(path_, key, "an integer", *v);
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path_, key);
  if (v->type == GgufValueType::kArray || v->type == GgufValueType::kString ||
      v->type == GgufValueType::kBool) {
    return WrongType(path_, key, "a number", *v);
  }
  return ScalarAsDouble(*v);
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path_, key);
  if (v->type != GgufValueType::kBool) return WrongType(path_, key, "a bool", *v);
  return std::get<bool>(v->scalar);
}

absl::StatusOr<absl::Span<const std::string_view>> GgufFile::GetStringArray(
    std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path_, key);
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString) {
    return WrongType(path_, key, "an array of strings", *v);
  }
  return absl::MakeConstSpan(v->string_array);
}

absl::StatusOr<absl::Span<const double>> GgufFile::GetNumberArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path_, key);
  if (v->type != GgufValueType::kArray || v->array_type == GgufValueType::kString ||
      v->array_type == GgufValueType::kArray) {
    return WrongType(path_, key, "an array of numbers", *v);
  }
  return absl::MakeConstSpan(v->number_array);
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(Av(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> GgufFile::metadata_keys() const {
  std::vector<std::string> keys;
  keys.reserve(metadata_.size());
  for (const auto& [k, v] : metadata_) keys.push_back(k);
  return keys;
}

}  // namespace witcert
