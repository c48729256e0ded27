// Metered decode attention on the H200: effective bandwidth per scheme, meter on vs off,
// next to the device-to-device copy bandwidth measured in the same run.
//
// Shapes (issue 5): GQA 32 query / 8 KV heads, d = 128, block 16, batch ∈ {1,16,64},
// context ∈ {8k,32k,128k}. Bytes = what the kernel must read: K and V codes + scales (kivi2:
// + its key groups), plus both witnesses when the meter is on (queries, outputs and block
// tables are < 0.1%).
// Timing, two ways side by side: cudaEvents around each decode call (decode + merge kernels), 5
// warm-ups, median of `iters` calls, so the host's launch work between the events counts; and the
// same calls back to back in a replayed CUDA graph (the engine's decode step is one), median per
// call over replays. Shapes whose KV is smaller than 4× the 60 MB L2 rotate over several layers
// so every call reads from HBM. KV is written by the real write path from hashed random
// fp32 rows (never zeros). Usage: bench_decode_cuda [--quick] [--csv FILE] [--splits N]...
// [--only LABEL] [--batch B]... [--ctx N]... [--iters N] [--exact-tail] (kivi2 as serving will run
// it: each sequence's unfilled last block read from the exact cache; rows labelled kivi2+tail).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/metered_decode_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/dither_hash.h"

namespace witcert {
namespace {

#define BENCH_CHECK(expr)                                                           \
  do {                                                                              \
    auto st_ = (expr);                                                              \
    if (!ToStatus(st_).ok) {                                                        \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ToStatus(st_).message.c_str()); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

CudaStatus ToStatus(const CudaStatus& s) { return s; }
CudaStatus ToStatus(cudaError_t e) {
  return e == cudaSuccess ? CudaStatus::Ok() : CudaStatus::Error(cudaGetErrorString(e));
}

__global__ void FillRows(float* x, int64_t n, uint64_t salt) {  // hashed N(0,1)-ish values
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t h = meter::Mix64(salt ^ static_cast<uint64_t>(i));
    float u1 = (static_cast<float>(h >> 40) + 0.5f) * 5.9604645e-8f;
    float u2 = static_cast<float>((h >> 16) & 0xffffff) * 5.9604645e-8f;
    x[i] = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}
__global__ void Iota(int64_t* x, int64_t n, int64_t start, int64_t mod) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = mod > 0 ? (start + i) % mod : start + i;
  }
}

__global__ void IotaBlocks(int32_t* x, int32_t n, int32_t start) {
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = start + i;
}

struct Row {
  std::string scheme;
  int batch;
  int64_t ctx;
  bool meter;
  int splits;
  double us, tbps;              // each call timed alone: host launch work included
  double graph_us, graph_tbps;  // calls back to back in a CUDA graph, as the engine replays them
};

double Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int CopyBandwidth(double* tbps) {
  const size_t bytes = size_t{4} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CHECK(cudaMalloc(&a, bytes));
  BENCH_CHECK(cudaMalloc(&b, bytes));
  BENCH_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int i = 0; i < 13; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (i >= 3) ms.push_back(t);
  }
  BENCH_CHECK(cudaGetLastError());
  *tbps = 2.0 * bytes / (Median(ms) * 1e-3) / 1e12;
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}

// A row set's name: the scheme, "/pipelined" or "/first" where that kernel was forced, and
// "/scale-only" or "/split-max" for Tier B's other forms (MeteredDecodeCudaArgs::tier_b_form).
std::string RunLabel(KvScheme scheme, int kernel, meter::TierBForm form) {
  return std::string(SchemeInfo(scheme).name) + (kernel == 2 ? "/pipelined" : kernel == 1 ? "/first" : "") +
         (form != meter::TierBForm::kPerToken ? std::string("/") + meter::TierBFormName(form) : "");
}

// kernel: MeteredDecodeCudaArgs::kernel (0: the default for the scheme, 1: the first kernel, 2: pipelined).
// splits: split counts run side by side (--splits N, repeatable); 0 = ChooseNumSplits.
// exact_tail (--exact-tail, kivi2): each sequence's last block read from the exact cache, as a
// sequence whose last block is unfilled needs it (its keys have no groups yet): exact_slot set, so
// the kernel looks its groups up, and that block's rows come from exact_kv.
int RunScheme(KvScheme scheme, int kernel, meter::TierBForm form, const std::vector<int>& batches,
              const std::vector<int64_t>& ctxs, const std::vector<int>& splits_list, int iters, bool exact_tail,
              std::vector<Row>* rows) {
  const std::string label =
      RunLabel(scheme, kernel, form) + (exact_tail && SchemeInfo(scheme).group_keys ? "+tail" : "");
  const int32_t hq = 32, hkv = 8, d = 128, bs = 16;
  for (int batch : batches) {
    for (int64_t ctx : ctxs) {
      PagedKvLayout L;
      L.num_kv_heads = hkv;
      L.block_size = bs;
      L.head_dim = d;
      L.num_bands = 8;
      L.scheme = scheme;
      const int64_t blocks_per_seq = ctx / bs;
      L.num_blocks = blocks_per_seq * batch;
      const double layer_bytes = static_cast<double>(L.num_blocks) * bs * hkv * L.BytesPerTokenPerHead();
      const int layers = static_cast<int>(std::min(16.0, std::max(1.0, std::ceil(240e6 / layer_bytes))));
      PagedKvPoolCuda pool;
      BENCH_CHECK(pool.Init(L, layers));
      // Write every layer from hashed rows, in chunks of ≤ 128k tokens.
      const int64_t total = batch * ctx, chunk = std::min<int64_t>(total, 131072);
      float *k = nullptr, *v = nullptr;
      int64_t *slots = nullptr, *pos = nullptr;
      int32_t* group_blocks = nullptr;  // kivi2: the chunk's blocks, keys encoded whole
      BENCH_CHECK(cudaMalloc(&group_blocks, sizeof(int32_t) * (chunk / bs + 1)));
      BENCH_CHECK(cudaMalloc(&k, sizeof(float) * chunk * hkv * d));
      BENCH_CHECK(cudaMalloc(&v, sizeof(float) * chunk * hkv * d));
      BENCH_CHECK(cudaMalloc(&slots, sizeof(int64_t) * chunk));
      BENCH_CHECK(cudaMalloc(&pos, sizeof(int64_t) * chunk));
      for (int l = 0; l < layers; ++l) {
        for (int64_t s0 = 0; s0 < total; s0 += chunk) {
          const int64_t n = std::min(chunk, total - s0);
          FillRows<<<1024, 256>>>(k, n * hkv * d, 2 * (s0 + 1000003 * l));
          FillRows<<<1024, 256>>>(v, n * hkv * d, 2 * (s0 + 1000003 * l) + 1);
          Iota<<<256, 256>>>(slots, n, s0, 0);     // physical slot = global token index
          Iota<<<256, 256>>>(pos, n, s0, ctx);     // position within its sequence
          KvWriteArgs a{k, v, slots, pos, n, l, 42};
          BENCH_CHECK(WriteKvCuda(L, pool.layer(l), a, nullptr));
          if (L.group_keys()) {  // chunks are whole blocks (ctx and the chunk are multiples of bs)
            const int32_t groups = static_cast<int32_t>(n / bs);
            IotaBlocks<<<64, 256>>>(group_blocks, groups, static_cast<int32_t>(s0 / bs));
            BENCH_CHECK(EncodeKeyGroupsCuda(L, pool.layer(l), KeyGroupArgs{.k = k, .blocks = group_blocks, .num_groups = groups, .outliers = {}}, nullptr));
          }
        }
      }
      BENCH_CHECK(cudaDeviceSynchronize());
      cudaFree(k); cudaFree(v); cudaFree(slots); cudaFree(pos); cudaFree(group_blocks);
      // Block tables: sequence b owns blocks [b·ctx/bs, (b+1)·ctx/bs), visited in a
      // scrambled order (non-contiguous, like a real pool after churn).
      std::vector<int32_t> tables(batch * blocks_per_seq);
      for (int b = 0; b < batch; ++b) {
        for (int64_t j = 0; j < blocks_per_seq; ++j) {
          tables[b * blocks_per_seq + j] = static_cast<int32_t>(b * blocks_per_seq + (j * 7919) % blocks_per_seq);
        }
      }
      if (blocks_per_seq % 7919 == 0) return 1;  // keep the scramble a permutation
      std::vector<int32_t> lens(batch, static_cast<int32_t>(ctx));
      std::vector<float> hq_host(static_cast<size_t>(batch) * hq * d);
      for (size_t i = 0; i < hq_host.size(); ++i) hq_host[i] = std::sin(0.37f * i);
      float *dq = nullptr, *dout = nullptr;
      int32_t *dt = nullptr, *dl = nullptr;
      meter::CertBound* dc = nullptr;
      BENCH_CHECK(cudaMalloc(&dq, sizeof(float) * hq_host.size()));
      BENCH_CHECK(cudaMalloc(&dout, sizeof(float) * hq_host.size()));
      BENCH_CHECK(cudaMalloc(&dt, sizeof(int32_t) * tables.size()));
      BENCH_CHECK(cudaMalloc(&dl, sizeof(int32_t) * batch));
      BENCH_CHECK(cudaMalloc(&dc, sizeof(meter::CertBound) * batch * hq));
      cudaMemcpy(dq, hq_host.data(), sizeof(float) * hq_host.size(), cudaMemcpyHostToDevice);
      cudaMemcpy(dt, tables.data(), sizeof(int32_t) * tables.size(), cudaMemcpyHostToDevice);
      cudaMemcpy(dl, lens.data(), sizeof(int32_t) * batch, cudaMemcpyHostToDevice);
      // --exact-tail: slot (b·layers + l)·Hkv + h for sequence b's last block, −1 elsewhere.
      int32_t* exact_slot = nullptr;
      float* exact_kv = nullptr;
      const bool tail = exact_tail && L.group_keys();
      if (tail) {
        std::vector<int32_t> slot_table(static_cast<size_t>(L.num_blocks) * layers * hkv, -1);
        for (int b = 0; b < batch; ++b) {
          const int64_t blk = tables[(b + 1) * blocks_per_seq - 1];
          for (int l = 0; l < layers; ++l) {
            for (int h = 0; h < hkv; ++h) slot_table[(blk * layers + l) * hkv + h] = (b * layers + l) * hkv + h;
          }
        }
        const int64_t exact_floats = static_cast<int64_t>(batch) * layers * hkv * 2 * bs * d;
        BENCH_CHECK(cudaMalloc(&exact_slot, sizeof(int32_t) * slot_table.size()));
        BENCH_CHECK(cudaMalloc(&exact_kv, sizeof(float) * exact_floats));
        cudaMemcpy(exact_slot, slot_table.data(), sizeof(int32_t) * slot_table.size(), cudaMemcpyHostToDevice);
        FillRows<<<1024, 256>>>(exact_kv, exact_floats, 77);
      }
      std::vector<std::pair<int, bool>> variants;  // (forced splits, meter): off then on per count
      for (int forced : splits_list) variants.insert(variants.end(), {{forced, false}, {forced, true}});
      for (const auto& [forced, meter] : variants) {
        MeteredDecodeCudaArgs a;
        a.q = dq;
        a.block_tables = dt;
        a.context_lens = dl;
        a.batch = batch;
        a.num_q_heads = hq;
        a.max_blocks_per_seq = static_cast<int32_t>(blocks_per_seq);
        a.max_context = ctx;
        a.dither_seed = 42;
        a.delta_loc = 1e-9;
        a.tier_b_form = form;
        a.meter = meter;
        a.kernel = kernel;
        a.num_splits = forced;
        a.out = dout;
        a.cert = dc;
        a.exact_slot = exact_slot;
        a.exact_kv = exact_kv;
        a.num_layers = tail ? layers : 0;
        int32_t splits = 0;
        BENCH_CHECK(ResolveNumSplits(L, a, &splits));
        a.workspace_bytes = MeteredDecodeWorkspaceBytes(batch, hq, d, splits);
        BENCH_CHECK(cudaMalloc(&a.workspace, a.workspace_bytes));
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        std::vector<float> ms;
        for (int i = 0; i < iters + 5; ++i) {
          a.layer = i % layers;
          cudaEventRecord(e0);
          BENCH_CHECK(MeteredDecodeCuda(L, pool.layer(a.layer), a, nullptr));
          cudaEventRecord(e1);
          cudaEventSynchronize(e1);
          float t = 0;
          cudaEventElapsedTime(&t, e0, e1);
          if (i >= 5) ms.push_back(t);
        }
        BENCH_CHECK(cudaGetLastError());
        // The same calls back to back in one CUDA graph (each on the next layer, so reads stay in
        // HBM where the rotation asks for it), replayed: the GPU time per call as the engine's
        // decode step sees it, without the host's launch work between the events.
        const int graph_calls = std::max(8, 2 * layers);
        cudaStream_t gs = nullptr;
        BENCH_CHECK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        BENCH_CHECK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < graph_calls; ++i) {
          a.layer = i % layers;
          BENCH_CHECK(MeteredDecodeCuda(L, pool.layer(a.layer), a, gs));
        }
        BENCH_CHECK(cudaStreamEndCapture(gs, &graph));
        BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        std::vector<float> gms;
        for (int i = 0; i < 2 + std::max(5, iters / 4); ++i) {
          cudaEventRecord(e0, gs);
          BENCH_CHECK(cudaGraphLaunch(exec, gs));
          cudaEventRecord(e1, gs);
          cudaEventSynchronize(e1);
          float t = 0;
          cudaEventElapsedTime(&t, e0, e1);
          if (i >= 2) gms.push_back(t / graph_calls);
        }
        BENCH_CHECK(cudaGetLastError());
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(gs);
        // The stored bytes per token (kivi2's key groups amortized over the block), less the
        // witnesses the kernel does not read: both with the meter off, the key witness in Tier B's
        // scale-only and split-max forms.
        const double per_tok =
            L.BytesPerTokenPerHead() - (meter ? (meter::TierBFormReadsKeyWitness(form) ? 0.0 : L.key_witness_bytes())
                                              : L.key_witness_bytes() + L.value_summary_bytes());
        const double bytes = per_tok * hkv * static_cast<double>(batch) * ctx;
        const double sec = Median(ms) * 1e-3, gsec = Median(gms) * 1e-3;
        rows->push_back({label, batch, ctx, meter, splits, sec * 1e6, bytes / sec / 1e12, gsec * 1e6,
                         bytes / gsec / 1e12});
        std::printf("%-20s batch %2d ctx %6lld meter %d splits %3d layers %2d: %9.1f us  %.3f TB/s;"
                    " graph %9.1f us  %.3f TB/s\n",
                    label.c_str(), batch, static_cast<long long>(ctx), meter, splits, layers,
                    sec * 1e6, bytes / sec / 1e12, gsec * 1e6, bytes / gsec / 1e12);
        std::fflush(stdout);
        cudaFree(a.workspace);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
      }
      cudaFree(dq); cudaFree(dout); cudaFree(dt); cudaFree(dl); cudaFree(dc); cudaFree(exact_slot); cudaFree(exact_kv);
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::vector<int> splits_flag;
  bool quick = false;
  const char* csv = nullptr;
  const char* only = nullptr;  // --only LABEL: one scheme/kernel row set (e.g. for ncu)
  int iters_flag = 0;
  bool exact_tail = false;  // --exact-tail: kivi2 with each sequence's last block exact (RunScheme)
  std::vector<int> batches_flag;
  std::vector<int64_t> ctxs_flag;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--exact-tail")) exact_tail = true;
    if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters_flag = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) batches_flag.push_back(std::atoi(argv[++i]));
    if (!std::strcmp(argv[i], "--ctx") && i + 1 < argc) ctxs_flag.push_back(std::atoll(argv[++i]));
    if (!std::strcmp(argv[i], "--splits") && i + 1 < argc) splits_flag.push_back(std::atoi(argv[++i]));
  }
  if (splits_flag.empty()) splits_flag = {0};
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  double copy = 0;
  if (CopyBandwidth(&copy)) return 1;
  std::printf("device-to-device copy: %.3f TB/s (read + write)\n", copy);
  std::vector<int> batches = quick ? std::vector<int>{1, 16} : std::vector<int>{1, 16, 64};
  std::vector<int64_t> ctxs = quick ? std::vector<int64_t>{8192} : std::vector<int64_t>{8192, 32768, 131072};
  if (!batches_flag.empty()) batches = batches_flag;
  if (!ctxs_flag.empty()) ctxs = ctxs_flag;
  std::vector<Row> rows;
  // int8-rtn and int8-dither twice: their default (tensor-core) kernel and the pipelined one,
  // side by side; int8-dither also in Tier B's scale-only and split-max forms; kivi2 its default
  // (the pipelined kernel) and the first one. bf16, outside issue 5's table, runs only when named
  // (--only bf16).
  struct Run {
    KvScheme scheme;
    int kernel;
    meter::TierBForm form = meter::TierBForm::kPerToken;
  };
  const Run runs[] = {{KvScheme::kFp16, 0},       {KvScheme::kInt8Rtn, 0},
                      {KvScheme::kInt8Rtn, 2},    {KvScheme::kInt8Dither, 0},
                      {KvScheme::kInt8Dither, 0, meter::TierBForm::kScaleOnly},
                      {KvScheme::kInt8Dither, 0, meter::TierBForm::kSplitMax},
                      {KvScheme::kInt8Dither, 2}, {KvScheme::kFp8Scaled, 0},
                      {KvScheme::kKivi2, 0},      {KvScheme::kKivi2, 1},
                      {KvScheme::kBf16, 0}};
  for (const auto& [s, kern, form] : runs) {
    if (only == nullptr ? s == KvScheme::kBf16 : RunLabel(s, kern, form) != only) continue;
    if (RunScheme(s, kern, form, batches, ctxs, splits_flag, iters_flag > 0 ? iters_flag : (quick ? 10 : 30),
                  exact_tail, &rows)) {
      return 1;
    }
  }
  // Capacity: tokens per GiB (one layer, one KV head, K+V, witnesses included).
  std::printf("\n| scheme | bytes/token/KV head (K+V) | tokens per GiB per (layer, KV head) | vs fp16 |\n|---|---|---|---|\n");
  for (int s = 0; s < static_cast<int>(KvScheme::kCount); ++s) {
    PagedKvLayout L;
    L.head_dim = 128;
    L.num_bands = 8;
    L.scheme = static_cast<KvScheme>(s);
    PagedKvLayout F = L;
    F.scheme = KvScheme::kFp16;
    std::printf("| %s | %.1f | %.0f | %.2fx |\n", SchemeInfo(L.scheme).name,
                L.BytesPerTokenPerHead(), 1073741824.0 / L.BytesPerTokenPerHead(),
                static_cast<double>(F.BytesPerTokenPerHead()) / L.BytesPerTokenPerHead());
  }
  std::printf("\n| scheme | batch | ctx | splits | off us | on us | off TB/s | on TB/s | meter overhead "
              "| graph off us | graph on us | graph on TB/s | graph meter overhead |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i + 1 < rows.size(); i += 2) {
    const Row& off = rows[i];
    const Row& on = rows[i + 1];
    std::printf("| %s | %d | %lldk | %d | %.1f | %.1f | %.2f | %.2f | %+.1f%% | %.1f | %.1f | %.2f | %+.1f%% |\n",
                on.scheme.c_str(), on.batch, static_cast<long long>(on.ctx / 1024), on.splits, off.us, on.us,
                off.tbps, on.tbps, 100.0 * (on.us / off.us - 1.0), off.graph_us, on.graph_us, on.graph_tbps,
                100.0 * (on.graph_us / off.graph_us - 1.0));
  }
  if (csv != nullptr) {
    FILE* f = std::fopen(csv, "w");
    if (f != nullptr) {
      std::fprintf(f, "scheme,batch,ctx,meter,splits,us,tbps,graph_us,graph_tbps\n");
      for (const Row& r : rows) {
        std::fprintf(f, "%s,%d,%lld,%d,%d,%.2f,%.4f,%.2f,%.4f\n", r.scheme.c_str(), r.batch,
                     static_cast<long long>(r.ctx), r.meter, r.splits, r.us, r.tbps, r.graph_us, r.graph_tbps);
      }
      std::fprintf(f, "copy,0,0,0,0,0,%.4f,0,0\n", copy);
      std::fclose(f);
    }
  }
  return 0;
}

}  // namespace
}  // namespace witcert

int main(int argc, char** argv) { return witcert::Main(argc, argv); }
