// A minimal GGUF (v2/v3) image builder for tests and the fuzz driver.
//
// Written from the GGUF specification, independently of the reader, so round-trip tests
// check the reader against the format rather than against itself. Build() also reports
// where each field landed, so corruption tests can patch exact bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ggml_type.h"

namespace witcert::testing {

// Value type numbers from the GGUF specification.
enum GgufType : uint32_t {
  kGgufU8 = 0,
  kGgufI8 = 1,
  kGgufU16 = 2,
  kGgufI16 = 3,
  kGgufU32 = 4,
  kGgufI32 = 5,
  kGgufF32 = 6,
  kGgufBool = 7,
  kGgufString = 8,
  kGgufArray = 9,
  kGgufU64 = 10,
  kGgufI64 = 11,
  kGgufF64 = 12,
};

template <typename T>
void AppendPod(std::string* out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out->append(buf, sizeof(T));
}

inline void AppendGgufString(std::string* out, std::string_view s) {
  AppendPod<uint64_t>(out, s.size());
  out->append(s);
}

template <typename T>
void PatchPod(std::string* image, size_t at, T v) {
  std::memcpy(image->data() + at, &v, sizeof(T));
}

struct GgufLayout {
  static constexpr size_t kVersionAt = 4;
  static constexpr size_t kTensorCountAt = 8;
  static constexpr size_t kKvCountAt = 16;
  std::vector<size_t> kv_at;           // offset of each KV's key-length field
  std::vector<size_t> kv_value_at;     // offset of each KV's value (after the type field)
  std::vector<size_t> tensor_info_at;  // offset of each tensor info's name-length field
  size_t data_start = 0;
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // Arbitrary value bytes: the payload is written verbatim after the type field.
  void AddRaw(std::string_view key, uint32_t type, std::string payload) {
    kvs_.push_back({std::string(key), type, std::move(payload)});
  }
  template <typename T>
  void AddScalar(std::string_view key, uint32_t type, T v) {
    std::string p;
    AppendPod<T>(&p, v);
    AddRaw(key, type, std::move(p));
  }
  void AddU32(std::string_view key, uint32_t v) { AddScalar(key, kGgufU32, v); }
  void AddF32(std::string_view key, float v) { AddScalar(key, kGgufF32, v); }
  void AddString(std::string_view key, std::string_view v) {
    std::string p;
    AppendGgufString(&p, v);
    AddRaw(key, kGgufString, std::move(p));
  }
  template <typename T>
  void AddArray(std::string_view key, uint32_t elem_type, const std::vector<T>& v) {
    std::string p;
    AppendPod<uint32_t>(&p, elem_type);
    AppendPod<uint64_t>(&p, v.size());
    for (const T& x : v) AppendPod<T>(&p, x);
    AddRaw(key, kGgufArray, std::move(p));
  }
  void AddStringArray(std::string_view key, const std::vector<std::string>& v) {
    std::string p;
    AppendPod<uint32_t>(&p, kGgufString);
    AppendPod<uint64_t>(&p, v.size());
    for (const std::string& s : v) AppendGgufString(&p, s);
    AddRaw(key, kGgufArray, std::move(p));
  }
  // Sets the data alignment and records it as `general.alignment` (u32).
  void SetAlignment(uint32_t alignment) {
    alignment_ = alignment;
    AddU32("general.alignment", alignment);
  }

  // `data` empty: filled with `size_bytes` deterministic bytes (computed from the GGML
  // block geometry; an unknown type gets 32 bytes).
  void AddTensor(std::string_view name, uint32_t type, std::vector<uint64_t> shape,
                 std::string data = {}) {
    if (data.empty()) {
      data.resize(TensorBytes(type, shape));
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
    }
    tensors_.push_back({std::string(name), type, std::move(shape), std::move(data)});
  }
  bool RemoveTensor(std::string_view name) {
    for (auto it = tensors_.begin(); it != tensors_.end(); ++it) {
      if (it->name == name) {
        tensors_.erase(it);
        return true;
      }
    }
    return false;
  }

  static size_t TensorBytes(uint32_t type, const std::vector<uint64_t>& shape) {
    const GgmlTypeInfo* info = GetGgmlTypeInfo(type);
    if (info == nullptr || shape.empty()) return 32;
    size_t rows = 1;
    for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
    return shape[0] / info->block_elems * info->block_bytes * rows;
  }

  std::string Build(GgufLayout* layout = nullptr) const {
    GgufLayout l;
    std::string out = "GGUF";
    AppendPod<uint32_t>(&out, version_);
    AppendPod<uint64_t>(&out, tensors_.size());
    AppendPod<uint64_t>(&out, kvs_.size());
    for (const Kv& kv : kvs_) {
      l.kv_at.push_back(out.size());
      AppendGgufString(&out, kv.key);
      AppendPod<uint32_t>(&out, kv.type);
      l.kv_value_at.push_back(out.size());
      out += kv.payload;
    }
    uint64_t offset = 0;  // within the data section
    std::vector<uint64_t> offsets;
    for (const Tensor& t : tensors_) {
      l.tensor_info_at.push_back(out.size());
      AppendGgufString(&out, t.name);
      AppendPod<uint32_t>(&out, static_cast<uint32_t>(t.shape.size()));
      for (uint64_t d : t.shape) AppendPod<uint64_t>(&out, d);
      AppendPod<uint32_t>(&out, t.type);
      AppendPod<uint64_t>(&out, offset);
      offsets.push_back(offset);
      offset = AlignUp(offset + t.data.size());
    }
    out.resize(AlignUp(out.size()), '\0');
    l.data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(l.data_start + offsets[i], '\0');  // padding between tensors
      out += tensors_[i].data;                      // no padding after the last one
    }
    if (layout != nullptr) *layout = std::move(l);
    return out;
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::string payload;
  };
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> shape;
    std::string data;
  };
  uint64_t AlignUp(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_;
  uint32_t alignment_ = 32;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace witcert::testing
