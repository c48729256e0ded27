// Does an L2 prefetch of a GEMV's weights, issued during a latency-bound kernel (the batch-1
// attention stands in: every SM busy, DRAM mostly idle), make the GEMV after it faster?
// Per iteration: stand-in kernel (spin_us on every SM; its CTAs may issue
// cp.async.bulk.prefetch.L2 for a share of the next GEMV's weights, or load that share for real),
// then the GEMV. Weights cycle through ≥ 256 MB of copies so nothing is in L2 from an earlier
// iteration. Prints µs per iteration for prefetched sizes 0 … all of the weights, the stand-in
// alone with the same prefetch, and the difference (the GEMV's share).
//   bench_l2_prefetch [reps=200] [spin_us=20]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "bench/decode_gpu/bench_gpu_util.h"
#include "kernels/cuda/ops/gemv_bf16_cuda.h"

namespace {


// hint: 0 plain, 1 evict_last policy on the prefetch, 2 no prefetch instruction but real 16-byte
// loads by every thread (an evict_last policy, results folded into a value no one reads): the lines
// must then be in L2 when the loads retire, where a prefetch is only a hint.
__global__ void StandIn(const uint8_t* pf, uint64_t pf_bytes, uint64_t spin_ns, int hint) {
  if (hint == 2 && pf_bytes > 0) {
    const uint64_t per = (pf_bytes / gridDim.x + 15) & ~uint64_t{15};
    const uint64_t lo = per * blockIdx.x;
    const uint64_t hi = lo + per < pf_bytes ? lo + per : pf_bytes;
    uint32_t fold = 0;
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    constexpr int kBatch = 8;  // loads in flight per thread before any result is used
    const uint64_t step = 16 * uint64_t{blockDim.x};
    for (uint64_t o = lo + 16 * threadIdx.x; o < hi; o += kBatch * step) {
      uint32_t r[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        r[k] = 0;
        const uint64_t ok = o + k * step;
        if (ok + 16 <= hi) {
          uint32_t a, b, c, d;
          asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                       : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(pf + ok), "l"(pol));
          r[k] = a ^ b ^ c ^ d;
        }
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) fold ^= r[k];
    }
    if (fold == 0x9e3779b9u && spin_ns == 1) asm volatile("trap;");  // keeps the loads; never true in use
  } else if (threadIdx.x == 0 && pf_bytes > 0) {
    const uint64_t per = (pf_bytes / gridDim.x + 15) & ~uint64_t{15};
    const uint64_t lo = per * blockIdx.x;
    const uint64_t hi = lo + per < pf_bytes ? lo + per : pf_bytes;
    uint64_t pol = 0;
    if (hint) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    for (uint64_t o = lo; o < hi; o += 32768) {
      const uint32_t n = static_cast<uint32_t>((hi - o < 32768 ? hi - o : 32768) & ~uint64_t{15});
      if (n == 0) break;
      if (hint) {
        asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(pf + o), "r"(n), "l"(pol)
                     : "memory");
      } else {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pf + o), "r"(n) : "memory");
      }
    }
  }
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < spin_ns);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  const double spin_us = argc > 2 ? std::atof(argv[2]) : 20.0;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  std::printf("SMs %d, L2 %.1f MB, stand-in %.1f us on %d CTAs\n", sms, l2 / 1e6, spin_us, 2 * sms);
  struct Shape {
    const char* name;
    long rows, cols;
  };
  const Shape shapes[] = {{"o", 4096, 4096}, {"qkv", 6144, 4096}, {"down", 4096, 14336}};
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  float* y;
  CHECK(cudaMalloc(&y, 1 << 20));
  uint16_t* x;
  CHECK(cudaMalloc(&x, 14336 * 2));
  CHECK(cudaMemset(x, 0x3c, 14336 * 2));
  auto time_it = [&](auto&& body) {
    for (int i = 0; i < 20; ++i) body(i);
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) body(i);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    return 1e3 * ms / reps;
  };
  const uint64_t spin_ns = static_cast<uint64_t>(spin_us * 1e3);
  const double alone = time_it([&](int) { StandIn<<<2 * sms, 256>>>(nullptr, 0, spin_ns, 0); });
  std::printf("stand-in alone: %.2f us\n", alone);
  std::printf("| shape | MB | prefetched MB | hint | stand-in + GEMV (us) | stand-in alone, same prefetch (us) | GEMV "
              "share (us) |\n|---|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    const size_t bytes = static_cast<size_t>(s.rows) * s.cols * 2;
    const WeightCopies w(bytes);
    const double fracs[] = {0.0, 0.25, 0.5, 0.75, 1.0};
    for (int hint = 0; hint < 3; ++hint) {
      for (double f : fracs) {
        if (hint && f == 0.0) continue;
        const uint64_t pf = static_cast<uint64_t>(bytes * f) & ~uint64_t{15};
        const double us = time_it([&](int i) {
          uint16_t* wi = w[i];
          StandIn<<<2 * sms, 256>>>(reinterpret_cast<const uint8_t*>(wi), pf, spin_ns, hint);
          CHECK(!witcert::GemvBf16Cuda(x, s.cols, wi, s.rows, y, 0.0f, nullptr, {2}).ok);
        });
        // The stand-in with the same prefetch and no GEMV: its loads may outlast the spin.
        const double pf_alone = time_it([&](int i) {
          StandIn<<<2 * sms, 256>>>(reinterpret_cast<const uint8_t*>(w[i]), pf, spin_ns, hint);
        });
        std::printf("| %s | %.1f | %.1f | %d | %.2f | %.2f | %.2f |\n", s.name, bytes / 1e6, pf / 1e6, hint, us,
                    pf_alone, us - pf_alone);
      }
    }
  }
  return 0;
}
