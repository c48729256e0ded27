// A safetensors image builder and a tiny Hugging Face checkpoint folder for tests.
//
// Written from the format description (8-byte little-endian header length, JSON header
// padded with spaces to a multiple of 8, raw data), independently of the reader: the header
// JSON is assembled by hand, not with the JSON library the reader uses. Tests patch the
// header text or the data to produce each corruption class.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace witcert::testing {

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<uint64_t> shape;
  std::string data;
};

inline std::string ShapeJson(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

// 8-byte length + header + data.
inline std::string AssembleSafetensors(std::string header, const std::string& data) {
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

class SafetensorsWriter {
 public:
  void Add(StTensor t) { tensors_.push_back(std::move(t)); }
  void SetMetadata(std::string key, std::string value) { metadata_[key] = value; }

  std::string Header() const {
    std::string h = "{";
    bool first = true;
    if (!metadata_.empty()) {
      h += "\"__metadata__\":{";
      bool f = true;
      for (const auto& [k, v] : metadata_) {
        if (!f) h += ',';
        h += "\"" + k + "\":\"" + v + "\"";
        f = false;
      }
      h += "}";
      first = false;
    }
    uint64_t offset = 0;
    for (const StTensor& t : tensors_) {
      h += first ? "" : ",";
      first = false;
      h += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + ShapeJson(t.shape) +
           ",\"data_offsets\":[" + std::to_string(offset) + "," +
           std::to_string(offset + t.data.size()) + "]}";
      offset += t.data.size();
    }
    return h + "}";
  }
  std::string Data() const {
    std::string d;
    for (const StTensor& t : tensors_) d += t.data;
    return d;
  }
  std::string Build() const { return AssembleSafetensors(Header(), Data()); }
  const std::vector<StTensor>& tensors() const { return tensors_; }

 private:
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

inline void WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh, empty folder under the system temp dir, removed by the destructor.
class TempFolder {
 public:
  explicit TempFolder(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("witcert_" + tag + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// ---- value encodings (bit-exact, independent of the product's converters) ----

inline uint16_t Bf16Bits(float v) {  // truncation: the tests pick values exact in BF16
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return static_cast<uint16_t>(b >> 16);
}
inline float Bf16Value(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
// F16 for values whose magnitude is in [2^-14, 2^15] and whose mantissa fits 10 bits.
inline uint16_t F16Bits(float v) {
  if (v == 0.0f) return 0;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint32_t exp = ((b >> 23) & 0xFF) - 112;
  return static_cast<uint16_t>(((b >> 16) & 0x8000) | (exp << 10) | ((b >> 13) & 0x3FF));
}

// Encodes `values` in `dtype`; values must be exactly representable (see RandomValues).
inline std::string Encode(const std::vector<float>& values, const std::string& dtype) {
  std::string out;
  for (float v : values) {
    if (dtype == "F32") {
      out.append(reinterpret_cast<const char*>(&v), 4);
    } else {
      const uint16_t h = dtype == "BF16" ? Bf16Bits(v) : F16Bits(v);
      out.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return out;
}

// Deterministic values k / 64 · scale-ish, exact in F32, F16 and BF16: integers in
// [-15, 15] times 2^-e, so at most 4 significant bits and a small exponent range.
inline std::vector<float> RandomValues(size_t n, uint32_t seed, int exponent, float offset = 0) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const int k = static_cast<int>((s >> 16) % 31) - 15;
    v[i] = offset + std::ldexp(static_cast<float>(k), -exponent);
  }
  return v;
}

}  // namespace witcert::testing
