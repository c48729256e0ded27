// Shared helpers of the CUDA kernel tests: device detection (tests skip without a GPU),
// RAII device buffers, and the CPU view of the GPU pool (one vector reassembled into the
// CPU codec's slot bytes, so the CPU codec decodes exactly what the GPU stored).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "gtest/gtest.h"
#include "engine/kv/outlier_channels.h"
#include "engine/kv/witness.h"
#include "kernels/cuda/paged_kv_cuda.h"

namespace witcert::testing {

inline bool HasCudaDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define WITCERT_SKIP_WITHOUT_GPU() \
  if (!::witcert::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device"

#define ASSERT_CUDA_OK(expr)                          \
  do {                                                \
    ::witcert::CudaStatus st_ = (expr);               \
    ASSERT_TRUE(st_.ok) << st_.message;               \
  } while (0)
#define ASSERT_CUDART(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { Resize(n); }
  ~DeviceBuffer() { if (p_) cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void Resize(size_t n) {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = n;
    if (n > 0 && cudaMalloc(&p_, n * sizeof(T)) != cudaSuccess) p_ = nullptr;
  }
  void Upload(const std::vector<T>& h) {
    Resize(h.size());
    if (!h.empty()) cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> Download() const {
    std::vector<T> h(n_);
    if (n_ > 0) cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  // Fills with a byte pattern (poison before a kernel writes).
  void Fill(int byte) { if (n_ > 0) cudaMemset(p_, byte, n_ * sizeof(T)); }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <class T>
std::vector<T> DownloadRaw(const T* p, size_t n) {
  std::vector<T> h(n);
  if (n > 0 && p != nullptr) cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

// Host copy of one layer of the pool.
struct HostPool {
  PagedKvLayout layout;
  std::vector<uint8_t> k_codes, v_codes;
  std::vector<uint16_t> k_scales, v_scales;
  std::vector<uint8_t> k_wit;               // [vectors, B] key band codes
  std::vector<uint16_t> k_unit, v_summary;  // [vectors] bf16 units; [vectors, 2] bf16 ρ, ν
  std::vector<uint16_t> k_group;  // [num_blocks, Hkv, d / 2, 2, 2] (kivi2, KeyGroupWord)
  std::vector<float> k_out, v_out;  // [vectors, m] (outlier channels)

  static HostPool Download(const PagedKvLayout& L, const PagedKvLayer& x) {
    HostPool h;
    h.layout = L;
    const size_t n = static_cast<size_t>(L.vectors());
    h.k_codes = DownloadRaw(x.k_codes, n * L.code_bytes());
    h.v_codes = DownloadRaw(x.v_codes, n * L.code_bytes());
    h.k_scales = DownloadRaw(x.k_scales, n * L.scales_per_vector(false));
    h.v_scales = DownloadRaw(x.v_scales, n * L.scales_per_vector(true));
    h.k_group = DownloadRaw(x.k_group, static_cast<size_t>(L.num_blocks * L.num_kv_heads) *
                                           L.group_params_per_block());
    h.k_out = DownloadRaw(x.k_outliers, n * L.outliers());
    h.v_out = DownloadRaw(x.v_outliers, n * L.outliers());
    if (L.has_witness()) {
      h.k_wit = DownloadRaw(x.k_witness, n * L.num_bands);
      h.k_unit = DownloadRaw(x.k_witness_unit, n);
      h.v_summary = DownloadRaw(x.v_summary, n * 2);
    }
    return h;
  }
  // The CPU codec's group parameter bytes of (block, KV head) `unit` (kivi2: [d fp16 zeros]
  // [d fp16 scales], from the GPU's channel pairs).
  std::vector<uint8_t> CpuGroupParams(int64_t unit) const {
    const int32_t d = layout.head_dim;
    std::vector<uint16_t> words(2 * d);
    for (int32_t c = 0; c < d; ++c) {
      words[c] = k_group[unit * 2 * d + KeyGroupWord(c, false)];
      words[d + c] = k_group[unit * 2 * d + KeyGroupWord(c, true)];
    }
    std::vector<uint8_t> bytes(4 * d);
    std::memcpy(bytes.data(), words.data(), bytes.size());
    return bytes;
  }
  // The CPU codec's slot bytes of vector `vec`: [scales][codes] (scaled; kivi2 values: [zero]
  // [scale][codes]) or [codes].
  std::vector<uint8_t> CpuSlot(int64_t vec, bool is_value) const {
    const int32_t cb = layout.code_bytes(), ns = layout.scales_per_vector(is_value);
    std::vector<uint8_t> slot(2 * ns + cb);
    const auto& sc = is_value ? v_scales : k_scales;
    const auto& co = is_value ? v_codes : k_codes;
    if (ns > 0) std::memcpy(slot.data(), &sc[vec * ns], 2 * ns);
    std::memcpy(slot.data() + 2 * ns, &co[vec * cb], cb);
    return slot;
  }
  const float* Outliers(int64_t vec, bool is_value) const {
    return &(is_value ? v_out : k_out)[vec * layout.outliers()];
  }
  // Vector `vec`'s stored witness in the CPU cache's byte layout (engine/kv/witness.h): keys
  // [unit][B codes], values [ρ][ν].
  std::vector<uint8_t> WitnessBytes(int64_t vec, bool is_value) const {
    if (is_value) {
      std::vector<uint8_t> b(4);
      std::memcpy(b.data(), &v_summary[vec * 2], 4);
      return b;
    }
    const int32_t nb = layout.num_bands;
    std::vector<uint8_t> b(2 + nb);
    std::memcpy(b.data(), &k_unit[vec], 2);
    std::memcpy(b.data() + 2, &k_wit[vec * nb], nb);
    return b;
  }
  // Decoded, as the CPU gather decodes them: key band bounds out [B]; value ρ and ν.
  void KeyBounds(int64_t vec, float* out) const {
    DecodeKeyWitness(WitnessBytes(vec, false).data(), layout.num_bands, out);
  }
  void ValueSummary(int64_t vec, float* rho, float* nu) const {
    DecodeValueSummary(WitnessBytes(vec, true).data(), rho, nu);
  }
};

// One layer's outlier tables on the device, as the CUDA kernels take them, from the CPU's
// OutlierChannels (layer 0 of `oc`): channels [Hkv, 2, m], fill sources [Hkv, 2, d].
struct DeviceOutlierTables {
  DeviceBuffer<int32_t> channels, fill_src;
  void Upload(const OutlierChannels& oc, int32_t hkv, int32_t d) {
    std::vector<int32_t> ch, fs;
    for (int32_t h = 0; h < hkv; ++h) {
      for (bool isv : {false, true}) {
        ch.insert(ch.end(), oc.channels(0, h, isv), oc.channels(0, h, isv) + oc.count());
        fs.insert(fs.end(), oc.fill_sources(0, h, isv), oc.fill_sources(0, h, isv) + d);
      }
    }
    channels.Upload(ch);
    fill_src.Upload(fs);
  }
  OutlierTables view() const { return OutlierTables{channels.get(), fill_src.get()}; }
};

}  // namespace witcert::testing
