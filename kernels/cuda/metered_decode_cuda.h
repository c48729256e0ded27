// Fused metered decode attention on the paged GPU KV pool: the CUDA twin of
// kernels/cpu/metered_attention.h, for a batch of sequences and all query heads at once.
//
// For every (sequence b, query head h) with GQA group g = h / (Hq/Hkv):
//   out[b,h]  = Σ_t p̂_t ṽ_t,  p̂ = softmax(q·k̃_t/√d) over t < context_lens[b]
//   cert[b,h] = FinalizeCert of the merged CertPartial (certificates.md §3-§5): TV bound,
//               A − 1, value bound, ... — the same fields as the CPU reference.
// Structure (why): one CTA per (sequence, KV head, split) reads each K/V byte of its split
// once for all Hq/Hkv query heads. Each split is reduced in two passes inside the CTA, like
// the CPU reference's split: pass 1 reads K and keeps the split's logits in shared memory,
// pass 2 reads V with the exact split max, so every CertPartial is a leaf with the CPU's m,
// chain and merge count (no online rescaling whose roundings the inflation would have to
// cover). A merge kernel combines the splits with MergePartials (tree) and FinalizeCert.
// Kernel: for int8-rtn with d = 128 and ≤ 4 query heads per KV head, the tensor-core kernel
// (metered_decode_int8_mma.cuh: exact int8 MMAs on digit-split queries and weights); else the
// pipelined one (metered_decode_pipelined.cuh: a cp.async ring of 64-token stages keeps loads
// in flight across every phase); block_size < 8 or args.kernel = 1 select the first,
// two-phase kernel (metered_decode_kernel.cuh). kivi2 runs the pipelined kernel (the first
// one with args.kernel = 1 or block_size < 8): its keys are decoded with their block's per-channel parameters, and a block whose keys are
// not encoded yet (fewer than block_size tokens, paged_kv_cuda.h) must be listed in exact_slot
// with its exact rows in exact_kv — read exact, ε̂ = 0, ρ = 0, with the meter on or off.
// Split count: ChooseNumSplits (below). The meter is a template flag: `meter = false` runs a
// kernel without any certificate arithmetic or witness reads.
// Preconditions: K and V share one scheme; head_dim 64 or 128; block_size a power of two;
// Hq/Hkv ≤ 8; every context_lens[b] ≤ max_context < 2^31 (a longer one yields a vacuous
// certificate and NaN output for that split, never an out-of-bounds access).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/tier_b_form.h"

namespace witcert {

struct MeteredDecodeCudaArgs {
  const float* q = nullptr;             // [batch, Hq, d] post-RoPE, device
  const int32_t* block_tables = nullptr;// [batch, max_blocks_per_seq] physical block ids, device
  const int32_t* context_lens = nullptr;// [batch] tokens to attend (≥ 1), device
  int32_t batch = 0;
  int32_t num_q_heads = 0;              // Hq; multiple of Hkv, Hq/Hkv ≤ 8
  int32_t max_blocks_per_seq = 0;
  int64_t max_context = 0;              // host copy of max(context_lens): sizes the splits
  int32_t layer = 0;                    // dither hash input
  uint64_t dither_seed = 0;
  double delta_loc = 0.0;               // Tier B per-cell δ; 0 disables Tier B
  // int8-dither with Tier B on (delta_loc > 0): the form the tensor-core kernel certifies in
  // (meter::TierBForm: per-token min(ε, u_t); scale-only u_t, no key witness read; split-max
  // from the split's largest K scale, meter::SetSplitMaxSums). The CPU reference's
  // MeteredAttentionOptions::tier_b_form with the kernel's SplitTokens cuts. The other kernels
  // (promoted blocks, other shapes) keep the per-token bound, which is never looser.
  meter::TierBForm tier_b_form = meter::TierBForm::kPerToken;
  bool meter = true;
  int32_t num_splits = 0;               // 0: ChooseNumSplits; else forced (clipped per sequence)
  int32_t kernel = 0;                   // 0: the fastest that applies (3, else 2, else 1);
                                        // 1: the first two-phase kernel (comparison/fallback);
                                        // 2: the pipelined kernel (block_size ≥ 8);
                                        // 3: the tensor-core kernel (int8-rtn, d = 128, G ≤ 4)
  // The gate's promoted blocks (certificates.md §6): when exact_slot is set, the token of a
  // (physical block, layer, KV head) with a slot ≥ 0 is read from exact_kv as fp32 and counts
  // ε̂ = 0, ρ = 0. Needs the meter (kivi2: not), runs the first kernel (kernel must be 0 or 1;
  // kivi2: 0 and 2 run the pipelined kernel). The table is read before the wait of an
  // overlapped launch: the kernel before must not change it.
  const int32_t* exact_slot = nullptr;  // [num_blocks, num_layers, Hkv] slot or −1, device
  const float* exact_kv = nullptr;      // [slots, 2 (K, V), block_size, d] fp32, device
  int32_t num_layers = 0;               // of the exact_slot table (layer < num_layers)
  // Outlier channel bypass (layout.outliers() = m > 0): this layer's channel table, as the write
  // path took it. Runs the first kernel with the meter (kivi2: meter on or off).
  const int32_t* outlier_channels = nullptr;  // [Hkv, 2 (K, V), m], device
  // Launch the tensor-core or pipelined kernel to overlap the kernel before it on the stream
  // (a programmatic dependent launch, dependent_launch.cuh): before it waits for that kernel, each
  // split streams its first stages of K/V, except the split holding the sequence's newest token
  // (position context − 1), which waits first. So the kernel before may write q and each
  // sequence's newest token (the decode step's KV write) but nothing else this call reads, and
  // must let its dependents start early (AllowNextKernelToStart) for the overlap to happen.
  // Other kernels (kivi2, outliers, exact reads, the first kernel) launch the ordinary way.
  // The split merge then goes out as a dependent launch too: those two decode kernels let it
  // launch once their loads are done, and it waits for them before it reads a partial.
  bool overlap_previous = false;
  float* out = nullptr;                 // [batch, Hq, d], device
  meter::CertBound* cert = nullptr;     // [batch, Hq], device (unused when meter is off)
  float* out_norm = nullptr;            // optional [batch, Hq] ‖out‖₂ per cell (RowNormsCuda's bits)
  uint16_t* out_bf16 = nullptr;         // optional [batch, Hq, d] out rounded to bf16 as well
                                        // (FloatToBf16Cuda's bits): the O projection's GEMM input
  void* workspace = nullptr;            // MeteredDecodeWorkspaceBytes(...) bytes, device
  size_t workspace_bytes = 0;
};

// True when the tensor-core kernel (MeteredDecodeCudaArgs::kernel = 3, the default there)
// handles this layout: int8-rtn or int8-dither, head_dim 128, at most 4 query heads per KV head,
// block_size ≥ 8, B = 8 witness bands, no outlier channels and fewer than 2^31 vectors per layer.
bool TensorCoreDecodeSupports(const PagedKvLayout& layout, int32_t q_per_kv);

// Longest split one CTA can hold at two CTAs per SM (its logits live in shared memory): 2048
// tokens for up to 4 query heads per KV head, 1536 for up to 8; 3072 where the layout takes the
// tensor-core kernel (the second form).
int64_t MaxSplitTokens(int32_t q_per_kv);
inline constexpr int64_t kTensorCoreMaxSplitTokens = 3072;
int64_t MaxSplitTokens(const PagedKvLayout& layout, int32_t q_per_kv);

// Tokens per split of a `context`-token sequence cut into at most `num_splits` splits: ⌈S/P⌉
// rounded up to whole 128-token stages (the tensor-core kernel's stage, two of the pipelined
// kernel's), so no split ends in a partial stage. Split i covers [i·L, min(S, (i+1)·L)), and
// SplitsUsed(S, P) = ⌈S / L⌉ ≤ P of them are non-empty (the merge combines those).
inline constexpr int64_t kSplitAlignTokens = 128;
__host__ __device__ inline int64_t SplitTokens(int64_t context, int64_t num_splits) {
  const int64_t even = (context + num_splits - 1) / num_splits;
  return (even + kSplitAlignTokens - 1) / kSplitAlignTokens * kSplitAlignTokens;
}
__host__ __device__ inline int64_t SplitsUsed(int64_t context, int64_t num_splits) {
  if (context <= 0) return 0;
  const int64_t len = SplitTokens(context, num_splits);
  return (context + len - 1) / len;
}

// Heuristic (documented in the .cu): the most splits that keep every CTA in the first wave
// (≤ 2 per SM), none shorter than 256 tokens, more only where a split would exceed
// MaxSplitTokens; there, up to twice that many where they fill the last wave of CTAs better
// (up to 4 query heads per KV head).
// Always ≥ 1 and ≤ max_context.
int32_t ChooseNumSplits(int32_t batch, int32_t num_kv_heads, int32_t q_per_kv,
                        int64_t max_context, int32_t num_sms);
// The same with the longest split given (MaxSplitTokens(layout, q_per_kv), as ResolveNumSplits does).
int32_t ChooseNumSplits(int32_t batch, int32_t num_kv_heads, int32_t q_per_kv,
                        int64_t max_context, int32_t num_sms, int64_t max_split);

// Workspace for `num_splits` splits (the value ResolveNumSplits returns).
size_t MeteredDecodeWorkspaceBytes(int32_t batch, int32_t num_q_heads, int32_t head_dim,
                                   int32_t num_splits);
// The split count MeteredDecodeCuda will use for `args` (queries the device's SM count).
CudaStatus ResolveNumSplits(const PagedKvLayout& layout, const MeteredDecodeCudaArgs& args,
                            int32_t* num_splits);

CudaStatus MeteredDecodeCuda(const PagedKvLayout& layout, const PagedKvLayer& kv,
                             const MeteredDecodeCudaArgs& args, cudaStream_t stream);

}  // namespace witcert
