// CPU matmul throughput for the default model's shapes (SmolLM2-135M, Q4_1 + Q8_0 head).
//
// Prints, per shape: GB/s of weight bytes streamed for n = 1 (decode GEMV) and GFLOP/s for
// n = 64 (prefill GEMM), for 1 and 2 threads, in the layout CpuBackend uses (packed x8 for
// Q4_0 / Q4_1 / Q8_0; the packed copy has the same byte count as the plain rows). "hot"
// re-multiplies one matrix (it stays in cache); "cold" rotates through copies totalling >= 512 MiB
// so weights come from DRAM, which is the decode situation for a model that does not fit in cache.
// Times are the best batch mean (see TimeIt). A plain read bandwidth probe gives the ceiling. A
// second table compares the instruction-set variants (scalar / avx2 / avxvnni / avx512vnni, forced
// through the test hook) side by side in GFLOP/s at n = 1, 16, 64 for the default model's shapes,
// then the row-interleaved copy the CPU backend actually multiplies by (packed-x8, packed_x8.h).
// The first table uses the variant Matmul picks on plain rows (WITCERT_CPU_KERNEL overrides it).
// Usage: bench_kernels_cpu [threads...] (default 1 2).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/packed_x8.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/quant_blocks.h"

namespace witcert {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Byte offsets of a block's fp16 scale fields (d, and the min where the format has one).
std::vector<size_t> HalfFields(GgmlType type) {
  switch (type) {
    case GgmlType::kQ6_K: return {208};
    case GgmlType::kQ2_K: return {80, 82};
    case GgmlType::kQ3_K: return {108};
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: return {0, 2};
    default: return {0};
  }
}

// Fills a matrix with random codes and small finite fp16 scales (HalfFields).
std::vector<uint8_t> MakeWeights(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  std::vector<uint8_t> bytes(GgmlRowBytes(*info, cols) * rows);
  uint64_t s = seed | 1;
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    std::memcpy(&bytes[i], &s, 8);
  }
  const uint16_t d = F32ToF16(0.01f);
  const std::vector<size_t> fields = HalfFields(type);
  for (size_t b = 0; b + info->block_bytes <= bytes.size(); b += info->block_bytes) {
    for (size_t off : fields) std::memcpy(&bytes[b + off], &d, 2);
  }
  return bytes;
}

struct Shape {
  const char* name;
  GgmlType type;
  int64_t cols, rows;  // y[n, rows] = x[n, cols] · Wᵀ
  int per_token;       // per layer in one decode step; 0: once per step; -1: not in the model
};

// Mean time of `fn` over the fastest of many ~0.2 ms batches within `budget` seconds. The
// minimum filters out preemption on a shared machine: it measures what the kernel does
// when it has the core, which is what the code controls.
template <typename F>
double TimeIt(F&& fn, double budget) {
  fn();
  const auto t0 = Clock::now();
  fn();
  const double once = std::max(1e-7, Seconds(t0, Clock::now()));
  const int per_batch = std::max(1, static_cast<int>(2e-4 / once));
  double best = 1e30;
  const auto start = Clock::now();
  do {
    const auto b0 = Clock::now();
    for (int i = 0; i < per_batch; ++i) fn();
    best = std::min(best, Seconds(b0, Clock::now()) / per_batch);
  } while (Seconds(start, Clock::now()) < budget);
  return best;
}

double ReadBandwidth(ThreadPool& pool, size_t bytes) {
  std::vector<uint8_t> buf(bytes, 1);  // [bytes]
  std::vector<float> sink(pool.num_threads() * 16, 0);
  const int64_t lines = static_cast<int64_t>(bytes / 64);
  auto run = [&] {
    pool.ParallelFor(lines, 1024, [&](int64_t b, int64_t e) {
      __m256i acc = _mm256_setzero_si256();
      for (int64_t l = b; l < e; ++l) {
        const __m256i* p = reinterpret_cast<const __m256i*>(buf.data() + 64 * l);
        acc =
            _mm256_add_epi8(acc, _mm256_add_epi8(_mm256_loadu_si256(p), _mm256_loadu_si256(p + 1)));
      }
      sink[(b * 16 / std::max<int64_t>(1, lines)) % sink.size()] += _mm256_extract_epi8(acc, 0);
    });
  };
  return static_cast<double>(bytes) / TimeIt(run, 0.5) / 1e9;
}

// GFLOP/s of every available variant at n = 1, 16, 64 on hot (cached) weights.
void CompareVariants(ThreadPool& pool) {
  namespace mi = matmul_internal;
  const Shape shapes[] = {
      {"Q4_1 [576->1536]", GgmlType::kQ4_1, 576, 1536, 0},
      {"Q4_1 [1536->576]", GgmlType::kQ4_1, 1536, 576, 0},
      {"Q4_1 [576->576]", GgmlType::kQ4_1, 576, 576, 0},
      {"Q4_1 [576->192]", GgmlType::kQ4_1, 576, 192, 0},
      {"Q8_0 [576->49152]", GgmlType::kQ8_0, 576, 49152, 0},
  };
  const int64_t ns[] = {1, 16, 64};
  std::printf("\nGFLOP/s by variant (hot weights; best batch mean)\n%-20s", "shape");
  for (mi::CpuKernel k : mi::kAllCpuKernels) {
    if (!mi::CpuKernelAvailable(k)) continue;
    for (int64_t n : ns) {
      char head[32];
      std::snprintf(head, sizeof(head), "%s n=%d", mi::CpuKernelName(k), static_cast<int>(n));
      std::printf(" %15s", head);
    }
  }
  for (int64_t n : ns) std::printf("   packed-x8 n=%d", static_cast<int>(n));
  std::printf("\n");
  for (const Shape& s : shapes) {
    const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(s.type));
    std::vector<uint8_t> bytes = MakeWeights(s.type, s.rows, s.cols, 7);  // [rows, row_bytes]
    const QuantMatrix w{s.type, s.rows, s.cols, GgmlRowBytes(*info, s.cols), bytes.data()};
    std::vector<float> x(64 * s.cols), y(64 * s.rows);  // [64, cols], [64, rows]
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>((i * 7919) % 2003) / 1000.0f - 1.0f;
    std::printf("%-20s", s.name);
    for (mi::CpuKernel k : mi::kAllCpuKernels) {
      if (!mi::CpuKernelAvailable(k)) continue;
      mi::SetCpuKernelOverride(k);
      for (int64_t n : ns) {
        const double t = TimeIt([&] { Matmul(x.data(), n, w, y.data(), &pool); }, 0.25);
        std::printf(" %15.1f", 2.0 * s.rows * s.cols * n / t / 1e9);
      }
    }
    mi::ClearCpuKernelOverride();
    // The row-interleaved copy the CPU backend builds (packed_x8.h).
    std::vector<uint8_t> packed;
    if (PackableX8(w)) {
      packed.resize(PackedX8Bytes(w.type, w.rows, w.cols));
      PackX8(w, packed.data());
    }
    QuantMatrix wp = w;
    wp.packed_x8 = packed.empty() ? nullptr : packed.data();
    for (int64_t n : ns) {
      if (packed.empty()) {
        std::printf(" %16s", "-");
        continue;
      }
      const double t = TimeIt([&] { Matmul(x.data(), n, wp, y.data(), &pool); }, 0.25);
      std::printf(" %16.1f", 2.0 * s.rows * s.cols * n / t / 1e9);
    }
    std::printf("\n");
  }
}

void Run(int threads) {
  ThreadPool pool(threads);
  std::printf("\n== %d thread(s); Matmul variant: %s\n", threads,
              matmul_internal::CpuKernelName(matmul_internal::SelectedCpuKernel()));
  CompareVariants(pool);
  std::printf("\n== %d thread(s); DRAM read probe: %.1f GB/s\n", threads,
              ReadBandwidth(pool, size_t{512} << 20));
  std::vector<int64_t> touched(1024);
  const double dispatch = TimeIt(
      [&] { pool.ParallelFor(1024, 1, [&](int64_t b, int64_t e) { touched[b] += e - b; }); }, 0.2);
  std::printf("ParallelFor dispatch (near-empty body): %.2f us\n", dispatch * 1e6);
  const Shape shapes[] = {
      {"attn_q/o Q4_1 [576->576]", GgmlType::kQ4_1, 576, 576, 2},
      {"attn_k/v Q4_1 [576->192]", GgmlType::kQ4_1, 576, 192, 2},
      {"ffn_gate/up Q4_1 [576->1536]", GgmlType::kQ4_1, 576, 1536, 2},
      {"ffn_down Q4_1 [1536->576]", GgmlType::kQ4_1, 1536, 576, 1},
      {"output Q8_0 [576->49152]", GgmlType::kQ8_0, 576, 49152, 0},
      // K-quants need cols % 256 == 0, so the 135M model can only use them here.
      {"(other) Q4_K [1536->576]", GgmlType::kQ4_K, 1536, 576, -1},
      {"(other) Q6_K [1536->576]", GgmlType::kQ6_K, 1536, 576, -1},
      {"(other) Q5_K [1536->576]", GgmlType::kQ5_K, 1536, 576, -1},
      {"(other) Q3_K [1536->576]", GgmlType::kQ3_K, 1536, 576, -1},
      {"(other) Q2_K [1536->576]", GgmlType::kQ2_K, 1536, 576, -1},
      {"(other) Q5_0 [1536->576]", GgmlType::kQ5_0, 1536, 576, -1},
      {"(other) Q5_1 [1536->576]", GgmlType::kQ5_1, 1536, 576, -1},
      {"(other) IQ4_NL [1536->576]", GgmlType::kIQ4_NL, 1536, 576, -1},
      {"(other) IQ4_XS [1536->576]", GgmlType::kIQ4_XS, 1536, 576, -1},
  };
  constexpr int kLayers = 30;
  double token_hot = 0, token_cold = 0;
  std::printf("%-30s %9s %9s %9s %9s %11s\n", "shape", "hot us", "hot GB/s", "cold us", "cold GB/s",
              "n=64 GFLOP/s");
  for (const Shape& s : shapes) {
    const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(s.type));
    const size_t row_bytes = GgmlRowBytes(*info, s.cols);
    const size_t mat_bytes = row_bytes * s.rows;
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t{512} << 20) / mat_bytes));
    // One allocation holding `copies` matrices back to back. [copies, rows, row_bytes]
    std::vector<uint8_t> all = MakeWeights(s.type, s.rows * copies, s.cols, 42);
    std::vector<QuantMatrix> mats(copies);
    // The layout CpuBackend multiplies by: each copy packed x8 where the format has one.
    std::vector<std::vector<uint8_t>> packed(copies);
    for (int c = 0; c < copies; ++c) {
      mats[c] = QuantMatrix{s.type, s.rows, s.cols, row_bytes, all.data() + c * mat_bytes};
      if (!PackableX8(mats[c])) continue;
      packed[c].resize(PackedX8Bytes(s.type, s.rows, s.cols));
      PackX8(mats[c], packed[c].data());
      mats[c].packed_x8 = packed[c].data();
    }
    const int64_t n_big = 64;
    std::vector<float> x(n_big * s.cols), y(n_big * s.rows);  // [64, cols], [64, rows]
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>((i * 7919) % 2003) / 1000.0f - 1.0f;

    const double hot = TimeIt([&] { Matmul(x.data(), 1, mats[0], y.data(), &pool); }, 0.3);
    int next = 0;
    const double cold = TimeIt(
        [&] {
          Matmul(x.data(), 1, mats[next], y.data(), &pool);
          next = (next + 1) % copies;
        },
        0.5);
    const double big = TimeIt([&] { Matmul(x.data(), n_big, mats[0], y.data(), &pool); }, 0.3);
    const double gflops = 2.0 * s.rows * s.cols * n_big / big / 1e9;
    std::printf("%-30s %9.1f %9.1f %9.1f %9.1f %11.1f\n", s.name, hot * 1e6, mat_bytes / hot / 1e9,
                cold * 1e6, mat_bytes / cold / 1e9, gflops);
    if (s.per_token < 0) continue;  // not part of the default model's decode step
    const int count = s.per_token == 0 ? 1 : s.per_token * kLayers;
    token_hot += count * hot;
    token_cold += count * cold;
  }
  std::printf(
      "decode step, matmuls only (30 layers + head): hot %.2f ms (%.0f tok/s), "
      "cold %.2f ms (%.0f tok/s)\n",
      token_hot * 1e3, 1.0 / token_hot, token_cold * 1e3, 1.0 / token_cold);
}

}  // namespace
}  // namespace witcert

int main(int argc, char** argv) {
  std::vector<int> threads;
  for (int i = 1; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {1, 2};
  for (int t : threads) witcert::Run(t);
  return 0;
}
