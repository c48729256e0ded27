// The batch-1 decode step's projections as CudaBackend launches them (its GEMV entry points,
// flags and shapes: engine/backend/cuda/cuda_projections.cc), for `layers` layers of
// Llama-3.1-8B with distinct weights, replayed from a CUDA graph, without the attention — against
// the same bytes through plain bf16 GEMVs. It prices what the engine's fused prologues (fp32 x,
// RMSNorm) and epilogues (RoPE split, SwiGLU) and its two-launch QKV cost in place, which the
// per-shape bench_gemv and the O → gate|up → down bench_gemv_chain do not show.
//
// Rows:
//  * whole layers: the engine's order (QKV's k|v rows, then its q rows, O, gate|up + SwiGLU,
//    down), with QKV in one launch, without the RMSNorm prologues, and all plain;
//  * each launch alone, `layers` of them back to back (what one call costs in a dependent chain).
// µs per layer (or per call), median over graph replays, and the rate over the weight bytes.
// Usage: bench_layer_gemvs [layers=16] [replays=9]. Needs only CUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench/decode_gpu/bench_gpu_util.h"
#include "kernels/cuda/ops/gemv_bf16_cuda.h"

namespace {

using witcert::GemvLaunch;
using witcert::GemvRopeSplitOut;
using witcert::RopeSplitRows;

// Llama-3.1-8B.
constexpr int64_t kHidden = 4096, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kFfn = 14336;
constexpr int64_t kQDim = kHeads * kHeadDim, kKvDim = kKvHeads * kHeadDim;
constexpr int64_t kQkvRows = kQDim + 2 * kKvDim;
constexpr GemvLaunch kEngineGemv{/*rows_per_warp=*/2, /*overlap_previous=*/true};

template <class T>
T* DeviceZeros(int64_t n) {
  T* p = nullptr;
  CHECK(cudaMalloc(&p, n * sizeof(T)));
  CHECK(cudaMemset(p, 0, n * sizeof(T)));
  return p;
}

// Small values that keep the residual finite over many replays: bf16 0x3c00 = 2⁻⁷.
uint16_t* DeviceWeights(int64_t elems) {
  uint16_t* p = nullptr;
  CHECK(cudaMalloc(&p, elems * 2));
  CHECK(cudaMemset(p, 0x3c, elems * 2));
  return p;
}

struct LayerWeights {
  uint16_t *qkv, *o, *gate_up, *down;
  float *attn_norm, *ffn_norm;
};

struct Activations {
  float* x = DeviceZeros<float>(kHidden);  // residual
  uint16_t* x_bf = DeviceZeros<uint16_t>(kHidden);
  float* q = DeviceZeros<float>(kQDim);
  float* k = DeviceZeros<float>(kKvDim);
  float* v = DeviceZeros<float>(kKvDim);
  float* qkv = DeviceZeros<float>(kQkvRows);
  float* attn = DeviceZeros<float>(kQDim);
  uint16_t* attn_bf = DeviceZeros<uint16_t>(kQDim);
  float* gate_up = DeviceZeros<float>(2 * kFfn);
  uint16_t* act = DeviceZeros<uint16_t>(kFfn);
  int64_t* position = DeviceZeros<int64_t>(1);
};

GemvRopeSplitOut RopeTargets(const Activations& a) {
  GemvRopeSplitOut out;
  out.num_heads = kHeads;
  out.num_kv_heads = kKvHeads;
  out.head_dim = kHeadDim;
  out.position = a.position;
  out.freq = 500000.0f;
  out.q = a.q;
  out.k = a.k;
  out.v = a.v;
  return out;
}

constexpr float kEps = 1e-5f;

// The launches, one function each, as the engine makes them.
void QkvPart(const LayerWeights& w, const Activations& a, const float* norm, RopeSplitRows part,
             cudaStream_t s) {
  CHECK(!witcert::GemvBf16RopeSplitCuda(a.x, norm, kEps, kHidden, w.qkv, RopeTargets(a), s,
                                        /*overlap_previous=*/true, part)
             .ok);
}
void OFromF32(const LayerWeights& w, const Activations& a, cudaStream_t s) {
  CHECK(!witcert::GemvBf16FromF32Cuda(a.attn, nullptr, kEps, kQDim, w.o, kHidden, a.x, 1.0f, s,
                                      kEngineGemv)
             .ok);
}
void GateUpSwiGlu(const LayerWeights& w, const Activations& a, const float* norm, cudaStream_t s) {
  CHECK(!witcert::GemvBf16SwiGluCuda(a.x, norm, kEps, kHidden, w.gate_up, kFfn, a.act, s, true).ok);
}
void Down(const LayerWeights& w, const Activations& a, cudaStream_t s) {
  CHECK(!witcert::GemvBf16Cuda(a.act, kFfn, w.down, kHidden, a.x, 1.0f, s, kEngineGemv).ok);
}
// A layer's projections in the engine's order, with or without the RMSNorm prologues, QKV as
// the engine's two launches (k|v rows, then q rows) or one.
void EngineLayer(const LayerWeights& w, const Activations& a, bool norms, bool split_qkv, cudaStream_t s) {
  const float* attn_norm = norms ? w.attn_norm : nullptr;
  if (split_qkv) {
    QkvPart(w, a, attn_norm, RopeSplitRows::kKeysValues, s);
    QkvPart(w, a, attn_norm, RopeSplitRows::kQueries, s);
  } else {
    QkvPart(w, a, attn_norm, RopeSplitRows::kAll, s);
  }
  OFromF32(w, a, s);
  GateUpSwiGlu(w, a, norms ? w.ffn_norm : nullptr, s);
  Down(w, a, s);
}
// Plain bf16-x GEMVs of the same shapes (the x they read is not the previous launch's output;
// for the time that does not matter).
void Plain(const uint16_t* x, int64_t cols, const uint16_t* w, int64_t rows, float* y, float beta,
           cudaStream_t s) {
  CHECK(!witcert::GemvBf16Cuda(x, cols, w, rows, y, beta, s, kEngineGemv).ok);
}

using Enqueue = std::function<void(const LayerWeights&, cudaStream_t)>;

// µs per replay of `layers` calls of `enqueue`, one per layer's weights, from one graph.
double GraphMicros(const std::vector<LayerWeights>& layers, const Enqueue& enqueue, int replays,
                   cudaStream_t s) {
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (const LayerWeights& w : layers) enqueue(w, s);
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaGraphLaunch(exec, s));  // warm-up
  std::vector<float> ms;
  for (int r = 0; r < replays; ++r) {
    CHECK(cudaEventRecord(e0, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return 1e3 * ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int num_layers = argc > 1 ? std::atoi(argv[1]) : 16;
  const int replays = argc > 2 ? std::atoi(argv[2]) : 9;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::vector<LayerWeights> layers(num_layers);
  for (LayerWeights& w : layers) {
    w.qkv = DeviceWeights(kQkvRows * kHidden);
    w.o = DeviceWeights(kHidden * kQDim);
    w.gate_up = DeviceWeights(2 * kFfn * kHidden);
    w.down = DeviceWeights(kHidden * kFfn);
    w.attn_norm = DeviceZeros<float>(kHidden);
    w.ffn_norm = DeviceZeros<float>(kHidden);
  }
  Activations a;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double qkv_mb = 2e-6 * kQkvRows * kHidden, o_mb = 2e-6 * kHidden * kQDim;
  const double gu_mb = 2e-6 * 2 * kFfn * kHidden, down_mb = 2e-6 * kHidden * kFfn;
  const double layer_mb = qkv_mb + o_mb + gu_mb + down_mb;
  std::printf("device %s, %d SMs, L2 %.1f MB; %d layers of Llama-3.1-8B projections, %.1f MB/layer\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize * 1e-6, num_layers, layer_mb);

  struct Row {
    const char* name;
    double mb;  // weight bytes per layer (or per call)
    Enqueue enqueue;
  };
  const std::vector<Row> rows = {
      {"layer: engine (QKV k|v, QKV q, O, gate|up+SwiGLU, down)", layer_mb,
       [&](const LayerWeights& w, cudaStream_t st) { EngineLayer(w, a, /*norms=*/true, /*split_qkv=*/true, st); }},
      {"layer: engine, QKV in one launch", layer_mb,
       [&](const LayerWeights& w, cudaStream_t st) { EngineLayer(w, a, true, false, st); }},
      {"layer: engine without the RMSNorm prologues", layer_mb,
       [&](const LayerWeights& w, cudaStream_t st) { EngineLayer(w, a, false, true, st); }},
      {"layer: plain bf16 GEMVs, same shapes", layer_mb,
       [&](const LayerWeights& w, cudaStream_t st) {
         Plain(a.x_bf, kHidden, w.qkv, kQkvRows, a.qkv, 0.0f, st);
         Plain(a.attn_bf, kQDim, w.o, kHidden, a.x, 1.0f, st);
         Plain(a.x_bf, kHidden, w.gate_up, 2 * kFfn, a.gate_up, 0.0f, st);
         Plain(a.act, kFfn, w.down, kHidden, a.x, 1.0f, st);
       }},
      {"call: QKV k|v rows (RMSNorm, RoPE split)", qkv_mb * kKvDim * 2 / kQkvRows,
       [&](const LayerWeights& w, cudaStream_t st) { QkvPart(w, a, w.attn_norm, RopeSplitRows::kKeysValues, st); }},
      {"call: QKV q rows (RMSNorm, RoPE split)", qkv_mb * kQDim / kQkvRows,
       [&](const LayerWeights& w, cudaStream_t st) { QkvPart(w, a, w.attn_norm, RopeSplitRows::kQueries, st); }},
      {"call: QKV one launch (RMSNorm, RoPE split)", qkv_mb,
       [&](const LayerWeights& w, cudaStream_t st) { QkvPart(w, a, w.attn_norm, RopeSplitRows::kAll, st); }},
      {"call: QKV plain", qkv_mb,
       [&](const LayerWeights& w, cudaStream_t st) { Plain(a.x_bf, kHidden, w.qkv, kQkvRows, a.qkv, 0.0f, st); }},
      {"call: O from fp32", o_mb, [&](const LayerWeights& w, cudaStream_t st) { OFromF32(w, a, st); }},
      {"call: O plain", o_mb,
       [&](const LayerWeights& w, cudaStream_t st) { Plain(a.attn_bf, kQDim, w.o, kHidden, a.x, 1.0f, st); }},
      {"call: gate|up (RMSNorm, SwiGLU)", gu_mb,
       [&](const LayerWeights& w, cudaStream_t st) { GateUpSwiGlu(w, a, w.ffn_norm, st); }},
      {"call: gate|up plain", gu_mb,
       [&](const LayerWeights& w, cudaStream_t st) { Plain(a.x_bf, kHidden, w.gate_up, 2 * kFfn, a.gate_up, 0.0f, st); }},
      {"call: down (plain, as the engine)", down_mb, [&](const LayerWeights& w, cudaStream_t st) { Down(w, a, st); }},
  };
  std::printf("\n| launches | MB | µs per layer or call (rounds) | TB/s |\n|---|---|---|---|\n");
  for (int round = 0; round < 2; ++round) {
    for (const Row& r : rows) {
      const double us = GraphMicros(layers, r.enqueue, replays, s) / num_layers;
      std::printf("| %s | %.1f | %.2f (round %d) | %.3f |\n", r.name, r.mb, us, round + 1, r.mb / us);
      std::fflush(stdout);
    }
  }
  CHECK(cudaStreamSynchronize(s));
  return 0;
}
