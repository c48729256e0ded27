#include "kernels/cuda/ops/gemv_bf16_cuda.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/ops/row_transforms.cuh"

namespace witcert {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;          // 16-byte loads in flight per lane
constexpr int64_t kMaxCols = 24576; // 48 KB of bf16 x in shared memory
constexpr size_t kDefaultSmemBytes = 40 << 10;  // more dynamic shared memory than this: opt in
constexpr size_t kPrefetchSmemBytes = 100 << 10;  // GemvLaunch::prefetch_rows: two CTAs an SM

__device__ __forceinline__ float Lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float Hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

__device__ __forceinline__ float Dot8(const uint4 a, const uint4 b, float acc) {
  acc = fmaf(Lo(a.x), Lo(b.x), acc);
  acc = fmaf(Hi(a.x), Hi(b.x), acc);
  acc = fmaf(Lo(a.y), Lo(b.y), acc);
  acc = fmaf(Hi(a.y), Hi(b.y), acc);
  acc = fmaf(Lo(a.z), Lo(b.z), acc);
  acc = fmaf(Hi(a.z), Hi(b.z), acc);
  acc = fmaf(Lo(a.w), Lo(b.w), acc);
  acc = fmaf(Hi(a.w), Hi(b.w), acc);
  return acc;
}

// Where x comes from: bf16 as given, or fp32 rounded to bf16 (FloatToBf16Cuda's bits),
// optionally RMS-normalized first (RmsNormCuda's bits: the same row functions).
enum class XIn { kBf16, kF32, kF32Norm };
constexpr int64_t kMaxF32Cols = 8192;  // the fp32 prologue holds x in registers: 8 float4 per thread
// float4s of x per thread in that prologue: a kernel is compiled for 4 (cols ≤ 4096) and for 8,
// since registers held for columns a shape does not have cost occupancy (XVec).
constexpr int XVecFor(int64_t cols) { return cols <= 4 * 4 * kThreads ? 4 : 8; }

// What a warp does with its rows' sums.
//  * kRows: y[row] = sum (+ beta·y[row]); a warp takes R consecutive rows.
//  * kSwiGlu: W = [gate; up] [2·ffn, cols]; warp j takes rows j and ffn + j and writes
//    act[j] = bf16(silu(gate_j)·up_j) (R = 2).
//  * kRopeSplit: W = the fused QKV rows; a warp takes the two rows of one RoPE pair of a q or k
//    head (or two adjacent v rows), adds the bias, rotates and writes q, k and v apart (R = 2).
enum class YOut { kRows, kSwiGlu, kRopeSplit };

struct GemvArgs {
  const uint16_t* x_bf16;
  const float* x_f32;
  const float* norm_weight;  // kF32Norm
  float eps;
  int64_t cols;
  const uint16_t* w;
  int64_t rows;
  float* y;
  float beta;
  uint16_t* act_bf16 = nullptr;  // kSwiGlu: [rows / 2]
  GemvRopeSplitOut rope{};       // kRopeSplit
  // The launch's warps are [warp_begin, warp_end) of the warps the whole GEMV has (WarpRows).
  int64_t warp_begin = 0, warp_end = INT64_MAX;
  bool wait_before_store = false;  // RopeSplitRows::kQueries: x is read before the wait
  // GemvLaunch::prefetch_rows, where it fits (Launch): each lane copies its chunks of its rows
  // past the first loop step into shared memory before the wait (RestSmemUint4), so a warp's
  // whole rows are in flight then.
  bool rest_in_smem = false;
};

// Shared memory of one CTA, in uint4: bf16 x [c8], for kF32Norm then the norm weight [cols / 4
// float4], then with rest_in_smem each warp's rows past the first kStep chunk steps: [kWarps,
// R, c8 / 32 − kStep, 32 lanes] (a lane reads back only what it copied).
constexpr int64_t XSmemUint4(int64_t c8, XIn in) { return c8 * (in == XIn::kF32Norm ? 3 : 1); }
constexpr int64_t RestSmemUint4(int64_t c8, int r, int step) { return int64_t{kWarps} * r * (c8 - step * 32); }

// The rows warp `wg` (a global warp index) computes, and whether it has any.
template <int R, YOut OUT>
__device__ __forceinline__ bool WarpRows(const GemvArgs& a, int64_t wg, int64_t (&row)[R]) {
  if constexpr (OUT == YOut::kRows) {
#pragma unroll
    for (int r = 0; r < R; ++r) row[r] = wg * R + r;
    return wg * R < a.rows;
  } else if constexpr (OUT == YOut::kSwiGlu) {
    static_assert(R == 2, "SwiGLU pairs a gate row with its up row");
    const int64_t ffn = a.rows / 2;
    row[0] = wg;
    row[1] = wg + ffn;
    return wg < ffn;
  } else {
    static_assert(R == 2, "RoPE pairs the two rows of one rotation");
    const GemvRopeSplitOut& t = a.rope;
    const int32_t d = t.head_dim, half = d / 2;
    const int64_t rot = int64_t{t.num_heads + t.num_kv_heads} * half;  // q and k pairs
    if (wg < rot) {
      const int64_t h = wg / half;
      const int32_t p = static_cast<int32_t>(wg % half);
      row[0] = h * d + cuda_ops::RopeDimA(p, d, t.interleaved);
      row[1] = h * d + cuda_ops::RopeDimB(p, d, t.interleaved);
    } else {
      row[0] = 2 * rot + 2 * (wg - rot);
      row[1] = row[0] + 1;
    }
    return row[0] < a.rows;
  }
}

// What kRopeSplit's epilogue needs besides the sums: the bias of the warp's two rows and the
// pair's rotation (an angle in double: pow, cos and sin). The bias and the position are final
// before the kernel starts (the header's contract), so each warp reads and computes them before
// it waits for the previous kernel, off the critical path.
struct RopeEpilogue {
  float bias[2] = {0.0f, 0.0f};
  cuda_ops::RopeRotation rotation{1.0f, 0.0f};
};
template <int R, YOut OUT>
__device__ __forceinline__ RopeEpilogue PrepareEpilogue(const GemvArgs& a, int64_t wg, const int64_t (&row)[R],
                                                        bool live) {
  RopeEpilogue e;
  if constexpr (OUT == YOut::kRopeSplit) {
    if (!live) return e;
    const GemvRopeSplitOut& t = a.rope;
    if (t.bias != nullptr) {
      e.bias[0] = t.bias[row[0]];
      e.bias[1] = t.bias[row[1]];
    }
    const int32_t d = t.head_dim, half = d / 2;
    if (wg < int64_t{t.num_heads + t.num_kv_heads} * half) {  // a q or k pair (v is not rotated)
      e.rotation = cuda_ops::RopeAngle(static_cast<int32_t>(wg % half), d, *t.position, t.freq);
    }
  }
  return e;
}

// Warp wg's rows' sums s [R] (every lane holds them) to the output.
template <int R, YOut OUT>
__device__ __forceinline__ void StoreRows(const GemvArgs& a, int64_t wg, const int64_t (&row)[R],
                                          const float (&s)[R], const RopeEpilogue& e, int lane) {
  if (lane != 0) return;
  if constexpr (OUT == YOut::kRows) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row[r] < a.rows) a.y[row[r]] = a.beta == 0.0f ? s[r] : fmaf(a.beta, a.y[row[r]], s[r]);
    }
  } else if constexpr (OUT == YOut::kSwiGlu) {
    a.act_bf16[wg] = cuda_ops::ToBf16Bits(cuda_ops::SiluMul(s[0], s[1]));
  } else {
    const GemvRopeSplitOut& t = a.rope;
    const int32_t d = t.head_dim, half = d / 2;
    const int64_t rot = int64_t{t.num_heads + t.num_kv_heads} * half;
    float xa = s[0], xb = s[1];
    if (t.bias != nullptr) {  // AddBiasRowsCuda's fp32 add, before the rotation
      xa = __fadd_rn(xa, e.bias[0]);
      xb = __fadd_rn(xb, e.bias[1]);
    }
    if (wg >= rot) {  // v: two adjacent rows, as they are
      const int64_t j = row[0] - 2 * rot;
      t.v[j] = xa;
      t.v[j + 1] = xb;
      return;
    }
    const int64_t h = wg / half;
    const int32_t p = static_cast<int32_t>(wg % half);
    float* out = h < t.num_heads ? t.q + h * d : t.k + (h - t.num_heads) * d;  // [d]
    cuda_ops::Rotate(e.rotation, xa, xb, &out[cuda_ops::RopeDimA(p, d, t.interleaved)],
                     &out[cuda_ops::RopeDimB(p, d, t.interleaved)]);
  }
}

// R output rows per warp: each 16-byte chunk of x (from shared memory) serves R rows, and a
// lane keeps R · S · kUnroll weight loads in flight. A warp issues its first weight loads (and for
// kF32Norm the CTA copies the norm weight to shared memory) before the CTA stages x, so they are
// in flight during that prologue (for kF32Norm a block-wide reduction). The norm weight's copy
// and XV's registers are worth 0.08–0.17 ms of the batch-1 8B step at 8k (bench/RESULTS.md,
// 2026-12-03 seventh session). S loop steps' loads are in flight per lane (1 or 2); XV float4s
// of fp32 x per thread (4 or 8).
template <int R, XIn IN, YOut OUT, int XV, int S>
__global__ void __launch_bounds__(kThreads) GemvBf16Kernel(const GemvArgs a) {
  extern __shared__ uint4 xs[];  // bf16 x [cols / 8 uint4]; kF32Norm: then norm_w
  const int64_t cols = a.cols, rows = a.rows, c8 = cols / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t wg = a.warp_begin + static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  int64_t row[R];
  const bool live = WarpRows<R, OUT>(a, wg, row) && wg < a.warp_end;
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {  // rows past the end re-read the last row; never stored
    wr[r] = reinterpret_cast<const uint4*>(a.w + (row[r] < rows ? row[r] : rows - 1) * cols);
  }
  int64_t i = lane;
  constexpr int kStep = S * kUnroll;  // 16-byte loads per row in flight
  uint4 wv[R][kStep];
  bool loaded = live && i + (kStep - 1) * 32 < c8;
  if (loaded) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int u = 0; u < kStep; ++u) wv[r][u] = __ldcs(wr[r] + i + u * 32);  // streamed once
    }
  }
  // rest_in_smem: chunk lane + 32·s of row r, s ≥ kStep, at rest[(r·steps_rest + s − kStep)·32 + lane]
  // (Launch: c8 is a multiple of kStep·32, so the main loop below covers every chunk). Its
  // copies are issued below, with the norm weight's, before the wait.
  const int64_t steps_rest = c8 / 32 - kStep;
  uint4* rest = xs + XSmemUint4(c8, IN) + int64_t{warp} * R * steps_rest * 32;
  const RopeEpilogue epilogue = PrepareEpilogue<R, OUT>(a, wg, row, live);
  // The norm weight is final before this kernel starts too: it goes to shared memory behind x
  // (cp.async, no registers held), so the RMS scale is not followed by another round trip.
  float4* norm_w = reinterpret_cast<float4*>(xs + c8);  // kF32Norm: [cols / 4]
  if constexpr (IN == XIn::kF32Norm) {
    const float4* wg4 = reinterpret_cast<const float4*>(a.norm_weight);
#pragma unroll
    for (int k = 0; k < XV; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      if (j < cols / 4) cuda_copy::CpAsync16(norm_w + j, wg4 + j, true);
    }
    cuda_copy::CpAsyncCommit();
  }
  if (a.rest_in_smem) {  // one group, empty for a warp without rows
    if (live) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        for (int64_t st = 0; st < steps_rest; ++st) {
          cuda_copy::CpAsync16(rest + (r * steps_rest + st) * 32 + lane, wr[r] + lane + 32 * (st + kStep), true);
        }
      }
    }
    cuda_copy::CpAsyncCommit();
  }
  // Everything above reads only what is final before this kernel starts (W, the norm weight, the
  // bias and the position). A programmatic dependent launch (GemvLaunch) may have started
  // this CTA before the previous kernel finished: wait for it before x and y are touched (with
  // wait_before_store, only before y: x was final before the previous kernel started). Without
  // that launch attribute both instructions are no-ops. Let the next kernel launch early too.
  if (!a.wait_before_store) cuda_launch::WaitForPreviousKernel();
  cuda_launch::AllowNextKernelToStart();
  if constexpr (IN == XIn::kBf16) {
    const uint4* xg = reinterpret_cast<const uint4*>(a.x_bf16);
    for (int64_t j = threadIdx.x; j < c8; j += kThreads) xs[j] = xg[j];
  } else {
    const int64_t n4 = cols / 4;
    float4 xv[XV];
    cuda_ops::LoadRowVec4<XV>(reinterpret_cast<const float4*>(a.x_f32), n4, xv);
    float scale = 1.0f;
    if constexpr (IN == XIn::kF32Norm) {
      scale = cuda_ops::RmsScale<XV, /*kReused=*/false>(xv, cols, a.eps);
      // Each thread reads back only the norm weights it copied (the rows' group may still fly).
      if (a.rest_in_smem) {
        cuda_copy::CpAsyncWait<1>();
      } else {
        cuda_copy::CpAsyncWait<0>();
      }
    }
    uint2* xs2 = reinterpret_cast<uint2*>(xs);
#pragma unroll
    for (int k = 0; k < XV; ++k) {
      const int64_t j = threadIdx.x + int64_t{k} * kThreads;
      if (j >= n4) break;
      float4 y = xv[k];
      if constexpr (IN == XIn::kF32Norm) {
        y = cuda_ops::NormScale4(xv[k], scale, norm_w[j]);
      }
      xs2[j] = cuda_ops::PackBf16x4(y);
    }
  }
  __syncthreads();
  if (!live) {
    if (a.wait_before_store) cuda_launch::WaitForPreviousKernel();  // every CTA waits
    return;
  }
  // acc[r][u] takes chunks u·32, u·32 + 128, … in order for any S (S steps of kUnroll chunks
  // are kUnroll-chunk steps back to back), so S does not change a bit of y.
  float acc[R][kUnroll] = {};
  for (; i + (kStep - 1) * 32 < c8; i += kStep * 32) {
    if (!loaded && a.rest_in_smem) {
      cuda_copy::CpAsyncWait<0>();
      const int64_t st = (i - lane) / 32 - kStep;  // the step's first chunk step past the registers'
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int u = 0; u < kStep; ++u) wv[r][u] = rest[(r * steps_rest + st + u) * 32 + lane];
      }
    } else if (!loaded) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int u = 0; u < kStep; ++u) wv[r][u] = __ldcs(wr[r] + i + u * 32);
      }
    }
    loaded = false;
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      const uint4 xv = xs[i + u * 32];
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][u % kUnroll] = Dot8(wv[r][u], xv, acc[r][u % kUnroll]);
    }
  }
  if constexpr (S > 1) {  // the last whole kUnroll steps
    for (; i + (kUnroll - 1) * 32 < c8; i += kUnroll * 32) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[r][u] = __ldcs(wr[r] + i + u * 32);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint4 xv = xs[i + u * 32];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][u] = Dot8(wv[r][u], xv, acc[r][u]);
      }
    }
  }
  for (; i < c8; i += 32) {
    const uint4 xv = xs[i];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][0] = Dot8(__ldcs(wr[r] + i), xv, acc[r][0]);
  }
  float sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s = (acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    sum[r] = s;
  }
  if (a.wait_before_store) cuda_launch::WaitForPreviousKernel();
  StoreRows<R, OUT>(a, wg, row, sum, epilogue, lane);
}

// The current device's SM count (read once per thread).
int SmCount() {
  thread_local int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
    return n;
  }();
  return sms;
}

template <int R, XIn IN, YOut OUT, int XV>
auto Kernel(bool two_steps) {
  if constexpr (R == 2) {
    if (two_steps) return GemvBf16Kernel<R, IN, OUT, XV, 2>;
  }
  return GemvBf16Kernel<R, IN, OUT, XV, 1>;
}

template <int R, XIn IN, YOut OUT = YOut::kRows>
CudaStatus Launch(const GemvArgs& a, bool overlap_previous, cudaStream_t stream, bool prefetch_rows = false) {
  const int64_t warps = std::min((a.rows + R - 1) / R, a.warp_end) - a.warp_begin;  // R = 2 pairs: rows / 2
  const int64_t blocks = (warps + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return CudaStatus::Error("GemvBf16Cuda: too many rows");
  // bf16 x is staged without the register prologue: one kernel (XV unused). Two rows per warp in
  // one wave (≤ 2 CTAs per SM, where its ≤ 128 registers do not limit occupancy): two steps' loads
  // in flight, 16 per lane (bench_layer_gemvs: O 11.4 → 10.2 µs, a layer 113.7 → 110.5).
  const bool one_wave = blocks <= 2 * static_cast<int64_t>(SmCount());
  bool two_steps = R == 2 && one_wave;
  void (*kernel)(GemvArgs) = Kernel<R, IN, OUT, 4>(two_steps);
  if constexpr (IN != XIn::kBf16) {
    if (XVecFor(a.cols) == 8) {
      kernel = Kernel<R, IN, OUT, 8>(false);  // > 128 registers with S = 2
      two_steps = false;
    }
  }
  // bf16 x [cols], then for kF32Norm the fp32 norm weight [cols], then the rows' rest.
  size_t smem = static_cast<size_t>(a.cols) * (IN == XIn::kF32Norm ? 6 : 2);
  const int step = (two_steps ? 2 : 1) * kUnroll;  // the kernel's kStep
  const int64_t c8 = a.cols / 8;
  const bool rest_fits = R == 2 && one_wave && c8 % (step * 32) == 0 && c8 > step * 32;
  const size_t rest_bytes = rest_fits ? static_cast<size_t>(RestSmemUint4(c8, R, step)) * 16 : 0;
  GemvArgs args = a;
  args.rest_in_smem = prefetch_rows && rest_fits && smem + rest_bytes <= kPrefetchSmemBytes;
  if (args.rest_in_smem) smem += rest_bytes;
  if (smem > kDefaultSmemBytes) {
    WITCERT_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
  }
  return cuda_launch::Launch(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream,
                             overlap_previous, args);
}

template <XIn IN>
CudaStatus LaunchRows(const GemvArgs& a, GemvLaunch launch, cudaStream_t stream) {
  switch (launch.rows_per_warp) {
    case 1: return Launch<1, IN>(a, launch.overlap_previous, stream);
    case 2: return Launch<2, IN>(a, launch.overlap_previous, stream, launch.prefetch_rows);
    case 4: return Launch<4, IN>(a, launch.overlap_previous, stream);
    default: return CudaStatus::Error("GemvBf16Cuda: rows_per_warp must be 1, 2 or 4");
  }
}

template <YOut OUT>
CudaStatus LaunchPaired(const GemvArgs& a, bool overlap_previous, cudaStream_t stream, bool prefetch = false) {
  return a.norm_weight != nullptr ? Launch<2, XIn::kF32Norm, OUT>(a, overlap_previous, stream, prefetch)
                                  : Launch<2, XIn::kF32, OUT>(a, overlap_previous, stream, prefetch);
}

}  // namespace

bool GemvBf16Supports(int64_t cols, const void* x, const void* w) {
  return cols > 0 && cols % 8 == 0 && cols <= kMaxCols &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

bool GemvBf16FromF32Supports(int64_t cols, const void* x, const void* w, const void* norm_weight) {
  return GemvBf16Supports(cols, x, w) && cols <= kMaxF32Cols &&
         reinterpret_cast<uintptr_t>(norm_weight) % 16 == 0;
}

CudaStatus GemvBf16Cuda(const uint16_t* x, int64_t cols, const uint16_t* w, int64_t rows,
                        float* y, float beta, cudaStream_t stream, GemvLaunch launch) {
  if (rows <= 0) return CudaStatus::Ok();
  if (!GemvBf16Supports(cols, x, w)) {
    return CudaStatus::Error("GemvBf16Cuda: cols must be a multiple of 8 up to 24576, x and W "
                             "16-byte aligned");
  }
  return LaunchRows<XIn::kBf16>(GemvArgs{x, nullptr, nullptr, 0.0f, cols, w, rows, y, beta}, launch, stream);
}

CudaStatus GemvBf16FromF32Cuda(const float* x, const float* norm_weight, float eps, int64_t cols,
                               const uint16_t* w, int64_t rows, float* y, float beta,
                               cudaStream_t stream, GemvLaunch launch) {
  if (rows <= 0) return CudaStatus::Ok();
  if (!GemvBf16FromF32Supports(cols, x, w, norm_weight)) {
    return CudaStatus::Error("GemvBf16FromF32Cuda: cols must be a multiple of 8 up to 8192, x, W "
                             "and the norm weight 16-byte aligned");
  }
  const GemvArgs a{nullptr, x, norm_weight, eps, cols, w, rows, y, beta};
  return norm_weight != nullptr ? LaunchRows<XIn::kF32Norm>(a, launch, stream)
                                : LaunchRows<XIn::kF32>(a, launch, stream);
}

CudaStatus GemvBf16SwiGluCuda(const float* x, const float* norm_weight, float eps, int64_t cols,
                              const uint16_t* w_gate_up, int64_t ffn, uint16_t* act,
                              cudaStream_t stream, bool overlap_previous) {
  if (ffn <= 0) return CudaStatus::Ok();
  if (!GemvBf16FromF32Supports(cols, x, w_gate_up, norm_weight) || act == nullptr) {
    return CudaStatus::Error("GemvBf16SwiGluCuda: cols must be a multiple of 8 up to 8192, x, W "
                             "and the norm weight 16-byte aligned, act set");
  }
  GemvArgs a{nullptr, x, norm_weight, eps, cols, w_gate_up, 2 * ffn, nullptr, 0.0f};
  a.act_bf16 = act;
  return LaunchPaired<YOut::kSwiGlu>(a, overlap_previous, stream);
}

CudaStatus GemvBf16RopeSplitCuda(const float* x, const float* norm_weight, float eps, int64_t cols,
                                 const uint16_t* w_qkv, const GemvRopeSplitOut& out,
                                 cudaStream_t stream, bool overlap_previous, RopeSplitRows part,
                                 bool prefetch_rows) {
  const int64_t rows = int64_t{out.num_heads + 2 * out.num_kv_heads} * out.head_dim;
  if (rows <= 0) return CudaStatus::Ok();
  if (!GemvBf16FromF32Supports(cols, x, w_qkv, norm_weight)) {
    return CudaStatus::Error("GemvBf16RopeSplitCuda: cols must be a multiple of 8 up to 8192, x, W "
                             "and the norm weight 16-byte aligned");
  }
  if (out.head_dim <= 0 || out.head_dim % 2 != 0 || out.num_heads <= 0 || out.num_kv_heads <= 0 ||
      out.position == nullptr || out.q == nullptr || out.k == nullptr || out.v == nullptr) {
    return CudaStatus::Error("GemvBf16RopeSplitCuda: needs an even head_dim, heads, the position "
                             "and q, k, v");
  }
  GemvArgs a{nullptr, x, norm_weight, eps, cols, w_qkv, rows, nullptr, 0.0f};
  a.rope = out;
  // Warps (WarpRows): the q heads' rotation pairs, then k's, then v's row pairs.
  const int64_t q_warps = int64_t{out.num_heads} * (out.head_dim / 2);
  if (part == RopeSplitRows::kKeysValues) a.warp_begin = q_warps;
  if (part == RopeSplitRows::kQueries) {
    a.warp_end = q_warps;
    a.wait_before_store = true;
  }
  return LaunchPaired<YOut::kRopeSplit>(a, overlap_previous, stream, prefetch_rows);
}

}  // namespace witcert
