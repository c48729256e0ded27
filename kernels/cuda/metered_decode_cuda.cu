// Host side of the fused metered decode: split heuristic, codec dispatch, split merge.
//
// η (the kernel's own logit rounding, cert_math.h) enters the certificate only through its
// maximum, so the kernel bounds max_t Σ_c|q_c k̃_c| by Σ over a token's lanes of each lane's
// max over tokens of its 8-channel partial Σ|q x|·s: never smaller, computed without an
// extra cross-lane reduction per token. The merge is a tree of MergePartials (depth ≤
// ⌈P/32⌉ + 5): its inflation counts the tree's depth, which is ≤ the CPU's sequential P−1,
// so the GPU bound can undercut the CPU's by at most the factor (1+κ)^(P−1) (tested).
#include "kernels/cuda/metered_decode_cuda.h"

#include <algorithm>

#include "kernels/cuda/metered_decode_int8_mma.cuh"
#include "kernels/cuda/metered_decode_kernel.cuh"
#include "kernels/cuda/metered_decode_pipelined.cuh"
#include "kernels/cuda/ops/row_transforms.cuh"

namespace witcert {
namespace cuda_kv {

extern template CudaStatus LaunchDecodeForCodec<DevFp32>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
extern template CudaStatus LaunchDecodeForCodec<DevFp16>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
extern template CudaStatus LaunchDecodeForCodec<DevBf16>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
extern template CudaStatus LaunchDecodeForCodec<DevFp8Raw>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
extern template CudaStatus LaunchDecodeForCodec<DevFp8Scaled>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
extern template CudaStatus LaunchDecodeForCodec<DevInt8Rtn>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
extern template CudaStatus LaunchDecodeForCodec<DevInt8Dither>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
extern template CudaStatus LaunchDecodeForCodec<DevInt4Rtn>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
extern template CudaStatus LaunchDecodeForCodec<DevKivi2>(const DecodeParams&, bool, dim3, size_t, cudaStream_t);
#define WITCERT_PIPE_EXTERN(C_) \
  extern template CudaStatus LaunchPipelinedForCodec<C_>(const DecodeParams&, const PipeSmemPlan&, bool, dim3, cudaStream_t);
WITCERT_PIPE_EXTERN(DevFp32)
WITCERT_PIPE_EXTERN(DevFp16)
WITCERT_PIPE_EXTERN(DevBf16)
WITCERT_PIPE_EXTERN(DevFp8Raw)
WITCERT_PIPE_EXTERN(DevFp8Scaled)
WITCERT_PIPE_EXTERN(DevInt8Rtn)
WITCERT_PIPE_EXTERN(DevInt8Dither)
WITCERT_PIPE_EXTERN(DevInt4Rtn)
WITCERT_PIPE_EXTERN(DevKivi2)
#undef WITCERT_PIPE_EXTERN
extern template CudaStatus LaunchInt8Mma<true, false, meter::TierBForm::kPerToken>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);
extern template CudaStatus LaunchInt8Mma<false, false, meter::TierBForm::kPerToken>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);
extern template CudaStatus LaunchInt8Mma<true, true, meter::TierBForm::kPerToken>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);
extern template CudaStatus LaunchInt8Mma<false, true, meter::TierBForm::kPerToken>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);
extern template CudaStatus LaunchInt8Mma<true, true, meter::TierBForm::kScaleOnly>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);
extern template CudaStatus LaunchInt8Mma<true, true, meter::TierBForm::kSplitMax>(const DecodeParams&, const MmaSmemPlan&, dim3, cudaStream_t);

namespace {

constexpr int32_t kMaxSplits = 1024;

// One CTA per (query head, sequence), head_dim + 32 threads: thread c < head_dim combines
// output channel c, and the last warp merges the certificate beside them. The outputs need only the merged max M, the split
// weights e^{m_i − M} and the denominator, which warp 0 computes from m, z and count alone;
// the full MergePartials tree and FinalizeCert (the longest chain, ncu: half of all stalls
// were the other warps waiting for it at a barrier) stay off the outputs' path.
constexpr int kMergeCached = 4;  // partials per lane of warp 0 kept in registers (P ≤ 128)
constexpr int kMergePreload = 32;  // partial outputs per output thread loaded up front

// The certificate of one cell from its P used partials (of `num_splits` stored: every load is
// issued before P is known), by one warp. The cross-lane sums are a butterfly, so every lane
// ends with the same sums and returns the same bound (the caller stores it from lane 0).
// Lane l first merges partials l, l + 32, ... in order (MergePartials). Across lanes the merge
// is flat: the max m over the lanes (exact), each lane's z, b, c scaled to it by one
// ScaledTerm, then a shuffle tree of sums. merges and chain are counted as the five-level MergePartials tree over the lanes
// counts them, while every value here passes through at most one ScaledTerm where that tree
// could apply five, and through the same five levels of additions: FinalizeCert's inflation
// for those counts covers it. (The tree put every level's logf/expf on one chain.)
__device__ __forceinline__ meter::CertBound MergeCertWarp(const meter::CertPartial* parts, int32_t num_splits,
                                                         int32_t P, int lane) {
  const unsigned full = 0xffffffffu;
  meter::CertPartial mine;
  for (int i = lane; i < num_splits; i += 32) {
    const meter::CertPartial x = parts[i];
    if (i < P) mine = meter::MergePartials(mine, x);
  }
  const bool live = mine.count > 0;
  float m = live ? mine.m : -INFINITY;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(full, m, o));
  const float shift = live ? mine.m - m : 0.0f;
  meter::CertPartial r;
  r.m = m;
  r.z = live ? meter::ScaledTerm(mine.z, shift) : 0.0f;
  r.b = live ? meter::ScaledTerm(mine.b, shift) : 0.0f;
  r.c = live ? meter::ScaledTerm(mine.c, shift) : 0.0f;
  r.eps_max = mine.eps_max;
  r.vmax = mine.vmax;
  r.eta_max = mine.eta_max;
  r.count = mine.count;
  r.chain = mine.chain;
  r.merges = mine.merges;
  r.bad = mine.bad;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    r.z += __shfl_xor_sync(full, r.z, o);
    r.b += __shfl_xor_sync(full, r.b, o);
    r.c += __shfl_xor_sync(full, r.c, o);
    r.eps_max = fmaxf(r.eps_max, __shfl_xor_sync(full, r.eps_max, o));
    r.vmax = fmaxf(r.vmax, __shfl_xor_sync(full, r.vmax, o));
    r.eta_max = fmaxf(r.eta_max, __shfl_xor_sync(full, r.eta_max, o));
    r.count += __shfl_xor_sync(full, r.count, o);
    r.chain = max(r.chain, static_cast<int64_t>(__shfl_xor_sync(full, static_cast<long long>(r.chain), o)));
    r.merges = max(r.merges, __shfl_xor_sync(full, r.merges, o));
    r.bad = __any_sync(full, r.bad);
  }
  r.merges += 5;
  return meter::FinalizeCert(r, P);
}

template <bool METER>
__global__ void MergeSplitsKernel(const meter::CertPartial* __restrict__ parts,  // [B, Hq, P]
                                  const float* __restrict__ part_acc,            // [B, Hq, P, D]
                                  const int32_t* __restrict__ context_lens, int32_t num_splits,
                                  int32_t num_q_heads, int32_t head_dim, float* __restrict__ out,
                                  meter::CertBound* __restrict__ cert, float* __restrict__ out_norm,
                                  uint16_t* __restrict__ out_bf16) {
  __shared__ float f[kMaxSplits];  // [P] e^{m_i − M}
  __shared__ float s_inv_z;
  __shared__ float s_out[256];     // [head_dim] the output row, for ‖õ‖
  // The next kernel (the O projection's GEMV at batch 1) may launch now and start on its
  // weights; it waits for this one before it reads the output.
  cuda_launch::AllowNextKernelToStart();
  cuda_launch::WaitForPreviousKernel();  // launched to overlap the decode kernel's reductions
  const int h = blockIdx.x, seq = blockIdx.y, tid = threadIdx.x;
  const int32_t P = static_cast<int32_t>(SplitsUsed(context_lens[seq], num_splits));
  const int64_t cell = static_cast<int64_t>(seq) * num_q_heads + h;
  const int64_t base = cell * num_splits;
  if (tid >= head_dim) {  // the certificate warp
    if (!METER || cert == nullptr) return;
    const meter::CertBound bound = MergeCertWarp(parts + base, num_splits, P, tid - head_dim);
    if (tid == head_dim) cert[cell] = bound;  // every lane holds the same bound
    return;
  }
  // Output thread c loads its channel of the first kMergePreload partial outputs now, so those
  // loads are in flight while warp 0 computes the split weights (the sum below keeps its order).
  float pre[kMergePreload];
#pragma unroll
  for (int k = 0; k < kMergePreload; ++k) pre[k] = k < num_splits ? part_acc[(base + k) * head_dim + tid] : 0.0f;
  if (tid < 32) {
    // One load of each partial's m, z and count (the first kMergeCached per lane stay in
    // registers). M as MergePartials finds it: the max m over the non-empty partials
    // (fmaxf is exact, so the order does not matter).
    // The loads are bounded by the stored count, not P, so they need not wait for context_lens.
    float mi[kMergeCached], zi[kMergeCached];
    bool ne[kMergeCached];
#pragma unroll
    for (int k = 0; k < kMergeCached; ++k) {
      const int i = tid + 32 * k;
      mi[k] = zi[k] = 0.0f;
      ne[k] = false;
      if (i < num_splits) {
        mi[k] = parts[base + i].m;
        zi[k] = parts[base + i].z;
        ne[k] = parts[base + i].count > 0;
      }
    }
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kMergeCached; ++k) {
      if (tid + 32 * k < P && ne[k]) m = fmaxf(m, mi[k]);
    }
    for (int i = tid + 32 * kMergeCached; i < P; i += 32) {
      if (parts[base + i].count > 0) m = fmaxf(m, parts[base + i].m);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float z = 0.0f;
#pragma unroll
    for (int k = 0; k < kMergeCached; ++k) {
      const int i = tid + 32 * k;
      if (i < P) {
        const float fi = expf(mi[k] - m);
        f[i] = fi;
        z += zi[k] * fi;
      }
    }
    for (int i = tid + 32 * kMergeCached; i < P; i += 32) {
      const float fi = expf(parts[base + i].m - m);
      f[i] = fi;
      z += parts[base + i].z * fi;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    if (tid == 0) s_inv_z = 1.0f / z;
  }
  // The output threads only (the certificate warp never waits here).
  asm volatile("bar.sync 1, %0;" ::"r"(head_dim) : "memory");
  float o = 0.0f;
#pragma unroll
  for (int k = 0; k < kMergePreload; ++k) {
    if (k < P) o += pre[k] * f[k];
  }
#pragma unroll 8
  for (int i = kMergePreload; i < P; ++i) o += part_acc[(base + i) * head_dim + tid] * f[i];
  o *= s_inv_z;
  out[cell * head_dim + tid] = o;
  if (out_bf16 != nullptr) out_bf16[cell * head_dim + tid] = cuda_ops::ToBf16Bits(o);
  if (out_norm == nullptr) return;
  // ‖õ‖ with RowNormsCuda's arithmetic (lane l sums channels l, l + 32, ..., then the same
  // shuffle tree), so the reported norm is the bits that kernel gives.
  s_out[tid] = o;
  asm volatile("bar.sync 1, %0;" ::"r"(head_dim) : "memory");
  if (tid >= 32) return;
  float ss = 0.0f;
  for (int j = tid; j < head_dim; j += 32) {
    const float v = s_out[j];
    ss += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (tid == 0) out_norm[cell] = sqrtf(ss);
}

int32_t GroupBound(int32_t q_per_kv) { return q_per_kv <= 4 ? 4 : 8; }  // GMAX

// The dispatch table: scheme → device codec.
CudaStatus LaunchForScheme(KvScheme scheme, const DecodeParams& p, bool meter, dim3 grid,
                           size_t dyn, cudaStream_t stream) {
  return WithDevCodec(scheme, "MeteredDecodeCuda: unknown scheme", [&](auto codec) {
    return LaunchDecodeForCodec<typename decltype(codec)::type>(p, meter, grid, dyn, stream);
  });
}

CudaStatus LaunchPipelinedForScheme(KvScheme scheme, const DecodeParams& p, const PipeSmemPlan& plan,
                                    bool meter, dim3 grid, cudaStream_t stream) {
  return WithDevCodec(scheme, "MeteredDecodeCuda: unknown scheme", [&](auto codec) {
    return LaunchPipelinedForCodec<typename decltype(codec)::type>(p, plan, meter, grid, stream);
  });
}

}  // namespace
}  // namespace cuda_kv

bool TensorCoreDecodeSupports(const PagedKvLayout& L, int32_t q_per_kv) {
  return (L.scheme == KvScheme::kInt8Rtn || L.scheme == KvScheme::kInt8Dither) && L.head_dim == cuda_kv::kMmaD && q_per_kv <= cuda_kv::kMmaG &&
         L.block_size >= 8 && L.num_bands == 8 && L.outliers() == 0 && L.vectors() < (int64_t{1} << 31);
}

// G ≤ 4: 2048 tokens (8192 logits, 32 KB); G = 8: 1536 (12288 logits), the pipelined kernel's
// limit.
int64_t MaxSplitTokens(int32_t q_per_kv) {
  return cuda_kv::GroupBound(q_per_kv) <= 4 ? 2048 : 1536;
}

// The tensor-core kernel's dynamic shared memory is its ring (3 × 18,688 B), 16 B of logits and
// about 0.25 B of block table per token (int8-dither: 2 KB of hashes more) beside 6.4 KB static,
// so two CTAs (≤ 113 KB each) still fit an SM at 3072 tokens: 110 KB (112 KB dither). The other
// kernels take such splits too (they are within their own shared-memory checks), only slower.
int64_t MaxSplitTokens(const PagedKvLayout& layout, int32_t q_per_kv) {
  return TensorCoreDecodeSupports(layout, q_per_kv) ? kTensorCoreMaxSplitTokens : MaxSplitTokens(q_per_kv);
}

// Why these numbers (bench/RESULTS.md, split sweep of 2026-12-01 17:45 UTC on the H200): a
// CTA's cost is largely fixed — prologue, pipeline fill, epilogue and one more partial to
// merge — and an SM keeps 2 CTAs (256 threads each) resident. So the best count is the most
// splits whose CTAs all fit the first wave at 2 per SM: batch 1 × 32k, GQA 32/8, int8: 32
// splits 49.7 µs with the meter, 16 splits 57.2, 66 (the old ≥ 4-per-SM rule) 65.9. A split
// under 256 tokens spends more on that fixed part than on reading KV; a split's logits must
// fit the shared-memory region (MaxSplitTokens), which sets the least count once the batch
// fills the GPU.
//
// There the CTAs run in waves of 2 per SM, and a last wave that is mostly empty costs as much as
// a full one: batch 16 × 8k (8 KV heads, int8) takes 84.3 µs at 4 splits (512 CTAs, 2 waves) and
// 96.4 at 5 (640, 3 waves), while 6 (768, 3 full waves) take 88.2 (bench/RESULTS.md, 2026-12-04
// tenth session). Those three and 8 splits (90.7) fit waves × (c0 + tokens per split) with c0 =
// 3.2 µs ≈ 170 tokens of streaming, so the count is the one of need … 2·need with the least such
// cost (the least count on ties). A context just past a multiple of the cap (8192 + a few decoded
// tokens) is where it matters: the cap alone would say 5 there.
namespace {
constexpr int64_t kSplitFixedTokens = 170;
int64_t SplitWaveCost(int64_t base, int64_t slots, int64_t context, int64_t num_splits) {
  const int64_t ctas = base * SplitsUsed(context, num_splits);
  return (ctas + slots - 1) / slots * (kSplitFixedTokens + SplitTokens(context, num_splits));
}
}  // namespace

int32_t ChooseNumSplits(int32_t batch, int32_t num_kv_heads, int32_t q_per_kv,
                        int64_t max_context, int32_t num_sms) {
  return ChooseNumSplits(batch, num_kv_heads, q_per_kv, max_context, num_sms, MaxSplitTokens(q_per_kv));
}

int32_t ChooseNumSplits(int32_t batch, int32_t num_kv_heads, int32_t q_per_kv,
                        int64_t max_context, int32_t num_sms, int64_t max_split) {
  if (max_context <= 1) return 1;
  const int64_t base = std::max<int64_t>(1, static_cast<int64_t>(batch) * num_kv_heads);
  const int64_t slots = 2 * static_cast<int64_t>(std::max(num_sms, 1));
  const int64_t fill = std::max<int64_t>(1, slots / base);
  const int64_t by_len = (max_context + 255) / 256;
  const int64_t need = (max_context + max_split - 1) / max_split;
  int64_t p = std::max(need, std::min(fill, by_len));
  // The cap sets the count and the CTAs take waves. Measured for up to 4 query heads per KV head;
  // at 8 (the pipelined kernel, Qwen2.5-7B at batch 16 × 8k) the search's 8 splits were 2.9%
  // slower than the cap's 6, so there the cap's count stands.
  if (p == need && base * need > slots && cuda_kv::GroupBound(q_per_kv) <= 4) {
    int64_t best = SplitWaveCost(base, slots, max_context, p);
    for (int64_t q = need + 1; q <= 2 * need && q <= max_context; ++q) {
      const int64_t cost = SplitWaveCost(base, slots, max_context, q);
      if (cost < best) {
        best = cost;
        p = q;
      }
    }
  }
  p = std::min(p, max_context);
  return static_cast<int32_t>(std::max<int64_t>(p, 1));
}

size_t MeteredDecodeWorkspaceBytes(int32_t batch, int32_t num_q_heads, int32_t head_dim,
                                   int32_t num_splits) {
  const size_t cells = static_cast<size_t>(batch) * num_q_heads * num_splits;
  size_t acc = cells * head_dim * sizeof(float);
  acc = (acc + 255) / 256 * 256;
  return acc + cells * sizeof(meter::CertPartial);
}

CudaStatus ResolveNumSplits(const PagedKvLayout& layout, const MeteredDecodeCudaArgs& args,
                            int32_t* num_splits) {
  if (layout.num_kv_heads <= 0 || args.num_q_heads % layout.num_kv_heads != 0) {
    return CudaStatus::Error("MeteredDecodeCuda: num_q_heads must be a multiple of num_kv_heads");
  }
  const int32_t g = args.num_q_heads / layout.num_kv_heads;
  const int64_t ctx = std::max<int64_t>(1, args.max_context);
  if (args.num_splits > 0) {
    *num_splits = static_cast<int32_t>(std::min<int64_t>(args.num_splits, ctx));
    const int64_t longest = SplitTokens(ctx, *num_splits);
    if (longest > MaxSplitTokens(layout, g)) {
      return CudaStatus::Error("MeteredDecodeCuda: " + std::to_string(*num_splits) +
                               " splits leave " + std::to_string(longest) +
                               " tokens per split, above the limit " + std::to_string(MaxSplitTokens(layout, g)));
    }
    return CudaStatus::Ok();
  }
  int dev = 0, sms = 132;
  WITCERT_CUDA_CALL(cudaGetDevice(&dev));
  WITCERT_CUDA_CALL(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  *num_splits = ChooseNumSplits(args.batch, layout.num_kv_heads, g, ctx, sms, MaxSplitTokens(layout, g));
  return CudaStatus::Ok();
}

CudaStatus MeteredDecodeCuda(const PagedKvLayout& layout, const PagedKvLayer& kv,
                             const MeteredDecodeCudaArgs& args, cudaStream_t stream) {
  using namespace cuda_kv;
  WITCERT_CUDA_RETURN_IF_ERROR(ValidateLayout(layout));
  if (args.batch <= 0) return CudaStatus::Ok();
  if (args.q == nullptr || args.block_tables == nullptr || args.context_lens == nullptr ||
      args.out == nullptr || args.workspace == nullptr || (args.meter && args.cert == nullptr)) {
    return CudaStatus::Error("MeteredDecodeCuda: null argument");
  }
  if ((layout.block_size & (layout.block_size - 1)) != 0) {
    return CudaStatus::Error("MeteredDecodeCuda: block_size must be a power of two");
  }
  if (args.max_context > static_cast<int64_t>(args.max_blocks_per_seq) * layout.block_size ||
      args.max_context >= (int64_t{1} << 31)) {
    return CudaStatus::Error("MeteredDecodeCuda: max_context exceeds the block table");
  }
  int32_t splits = 0;
  WITCERT_CUDA_RETURN_IF_ERROR(ResolveNumSplits(layout, args, &splits));
  if (splits > kMaxSplits) return CudaStatus::Error("MeteredDecodeCuda: more than 1024 splits");
  const int32_t g = args.num_q_heads / layout.num_kv_heads;
  if (g > 8) return CudaStatus::Error("MeteredDecodeCuda: at most 8 query heads per KV head");
  const size_t need = MeteredDecodeWorkspaceBytes(args.batch, args.num_q_heads, layout.head_dim, splits);
  if (args.workspace_bytes < need) {
    return CudaStatus::Error("MeteredDecodeCuda: workspace of " + std::to_string(args.workspace_bytes) +
                             " bytes, need " + std::to_string(need));
  }
  const int64_t ctx = std::max<int64_t>(1, args.max_context);
  DecodeParams p;
  p.layout = layout;
  p.kv = kv;
  p.q = args.q;
  p.block_tables = args.block_tables;
  p.context_lens = args.context_lens;
  p.num_q_heads = args.num_q_heads;
  p.q_per_kv = g;
  p.max_blocks = args.max_blocks_per_seq;
  p.num_splits = splits;
  p.lcap = static_cast<int32_t>(SplitTokens(ctx, splits));  // ≥ every sequence's split
  p.layer = args.layer;
  p.code_bytes = layout.code_bytes();
  p.nscale = layout.scales_per_vector(false);  // K = V for every scaled scheme
  p.bs_shift = 0;
  while ((1 << p.bs_shift) < layout.block_size) ++p.bs_shift;
  p.seed = args.dither_seed;
  p.overlap_previous = args.overlap_previous;
  p.delta_loc = args.delta_loc;
  p.neg_log_delta = meter::TierBNegLogDelta(args.delta_loc);
  const size_t cells = static_cast<size_t>(args.batch) * args.num_q_heads * splits;
  p.part_acc = static_cast<float*>(args.workspace);
  size_t acc_bytes = (cells * layout.head_dim * sizeof(float) + 255) / 256 * 256;
  p.parts = reinterpret_cast<meter::CertPartial*>(static_cast<char*>(args.workspace) + acc_bytes);
  const int gmax = GroupBound(g);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(layout.num_kv_heads),
                  static_cast<unsigned>(args.batch));
  const bool exact = args.exact_slot != nullptr;
  // Group-keyed schemes (kivi2) read the blocks whose keys are not encoded yet from the exact
  // table, meter on or off: the pipelined kernel (kernel 2, block_size >= 8) or the first one.
  // The outlier bypass runs the first kernel only (its OUTLIERS variant puts the exact channels
  // back), with the meter on unless the scheme is kivi2.
  const bool group_keys = layout.group_keys();
  const bool outliers = layout.outliers() > 0;
  if (outliers && args.kernel != 0 && args.kernel != 1) {
    return CudaStatus::Error("MeteredDecodeCuda: outlier channels run the first kernel only (kernel 0 or 1)");
  }
  if (group_keys && args.kernel == 3) {
    return CudaStatus::Error("MeteredDecodeCuda: kivi2 runs the pipelined or the first kernel (kernel 0, 1 or 2)");
  }
  if (outliers && (args.outlier_channels == nullptr || (!args.meter && !group_keys))) {
    return CudaStatus::Error("MeteredDecodeCuda: outlier channels need their table and the meter on");
  }
  if (outliers) {
    p.outlier_channels = args.outlier_channels;
    p.num_outliers = layout.outliers();
  }
  if (exact) {
    if (args.exact_kv == nullptr || (!args.meter && !group_keys) || args.layer < 0 ||
        args.layer >= args.num_layers || (args.kernel != 0 && args.kernel != 1 && !(group_keys && args.kernel == 2))) {
      return CudaStatus::Error("MeteredDecodeCuda: exact reads need exact_kv, the meter, "
                               "0 <= layer < num_layers and the first kernel (kivi2: or the pipelined one)");
    }
    p.exact_slot = args.exact_slot;
    p.exact_kv = args.exact_kv;
    p.num_layers = args.num_layers;
  }
  const PipeSmemPlan plan = MakePipeSmemPlan(layout, gmax, p.lcap);
  const bool mma_ok = TensorCoreDecodeSupports(layout, g);
  if (args.kernel == 3 && !mma_ok) {
    return CudaStatus::Error("MeteredDecodeCuda: the tensor-core kernel takes int8-rtn or int8-dither, head_dim 128, "
                             "at most 4 query heads per KV head, block_size >= 8 and 8 witness bands");
  }
  if (!exact && !outliers && (args.kernel == 0 || args.kernel == 3) && mma_ok) {
    const MmaSmemPlan mplan = MakeMmaSmemPlan(layout, p.lcap);
    if (mplan.bytes > 200 * 1024) return CudaStatus::Error("MeteredDecodeCuda: split too long for shared memory");
    const bool dither = layout.scheme == KvScheme::kInt8Dither;
    using meter::TierBForm;
    const TierBForm form = dither && args.meter && args.delta_loc > 0.0 ? args.tier_b_form : TierBForm::kPerToken;
    WITCERT_CUDA_RETURN_IF_ERROR(
        (form == TierBForm::kSplitMax    ? LaunchInt8Mma<true, true, TierBForm::kSplitMax>(p, mplan, grid, stream)
         : form == TierBForm::kScaleOnly ? LaunchInt8Mma<true, true, TierBForm::kScaleOnly>(p, mplan, grid, stream)
         : dither ? (args.meter ? LaunchInt8Mma<true, true, TierBForm::kPerToken>(p, mplan, grid, stream)
                                : LaunchInt8Mma<false, true, TierBForm::kPerToken>(p, mplan, grid, stream))
                  : (args.meter ? LaunchInt8Mma<true, false, TierBForm::kPerToken>(p, mplan, grid, stream)
                                : LaunchInt8Mma<false, false, TierBForm::kPerToken>(p, mplan, grid, stream))));
  } else if (!outliers && layout.block_size >= 8 && plan.bytes <= 200 * 1024 &&
             (args.kernel == 0 || args.kernel == 2) && (group_keys || !exact)) {
    // kivi2 reads its exact blocks in the pipelined kernel too (PipeExactRows); other schemes'
    // exact reads (the gate's promoted blocks) take the first kernel.
    WITCERT_CUDA_RETURN_IF_ERROR(LaunchPipelinedForScheme(layout.scheme, p, plan, args.meter, grid, stream));
  } else {
    const size_t dyn = sizeof(float) * std::max<size_t>(static_cast<size_t>(gmax) * p.lcap,
                                                        static_cast<size_t>(kWarps) * gmax * layout.head_dim);
    if (dyn > 200 * 1024) return CudaStatus::Error("MeteredDecodeCuda: split too long for shared memory");
    WITCERT_CUDA_RETURN_IF_ERROR(LaunchForScheme(layout.scheme, p, args.meter, grid, dyn, stream));
  }
  const dim3 mgrid(static_cast<unsigned>(args.num_q_heads), static_cast<unsigned>(args.batch));
  return cuda_launch::Launch(args.meter ? MergeSplitsKernel<true> : MergeSplitsKernel<false>, mgrid,
                             dim3(layout.head_dim + 32), /*smem=*/0, stream, args.overlap_previous, p.parts,
                             p.part_acc, args.context_lens, splits, args.num_q_heads, layout.head_dim, args.out,
                             args.meter ? args.cert : nullptr, args.out_norm, args.out_bf16);
}

}  // namespace witcert
