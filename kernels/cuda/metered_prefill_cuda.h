// Metered attention of a prompt chunk over the stored (quantized) KV: the chunked-prefill
// twin of the decode kernel, for a chunk that does not start at position 0.
//
// Math (per row, the CPU backend's StoredAttention): row i of the chunk, at position
// start_pos + i, attends stored tokens [0, start_pos + i] of its sequence — the earlier
// chunks and this chunk's own rows up to itself, all as the pool stores them (the chunk's
// K/V were written before) — with one certificate cell per (row, query head), exactly what
// MeteredDecodeCuda returns for that row as a one-token query. Run row by row through the
// decode kernel, a chunk of n rows reads the stored context n times (O(n·S) bytes); here a
// CTA holds 64 query vectors (rows × the query heads of one KV head) and reads each KV tile
// once for all of them, on tensor cores.
//
// Supported (MeteredPrefillCudaSupports): every scheme but fp32 — int8-rtn, int8-dither, int4-rtn,
// fp16, bf16, fp8-e4m3 (raw or scaled) and kivi2 — K and V without outlier channels, head_dim 128,
// 8 witness bands, block_size ≥ 8 (a power of two), any Hq/Hkv.
//
// Arithmetic, int8-rtn (kernels/cuda/metered_prefill_int8.cu has the derivation): q·k by exact
// int8 tensor-core MMAs on the four base-128 digits of the query (kernels/meter/int_digit_dot.h,
// same logits and η bound as the tensor-core decode kernel; int8-dither adds the dither bytes'
// dots and Tier B as that kernel does; int4-rtn, metered_prefill_int4.cu, one 32-channel group per
// k-step and the group scales after, IntDigitEtaInt4). 16-bit float keys
// (metered_prefill_float.cu): the query as two digits of the key's format against the exact keys
// on fp16 / bf16 MMAs, η by the decode kernel's tensor-core model (tc_logit_eta.cuh). Both: online
// softmax over 32-token tiles, each rescale of the running sums counted as one merge of
// cert_math.h's SumInflation (a rescale is one product by one rounded exponential, ≤ κ); the
// certificate sums per (row, head) as in PartialAddTokenWeighted; p·v on fp16 MMAs with fp32
// accumulation (the output only: ~1e-3 relative, like any fp16 attention; the certificate never
// uses it). kivi2 (metered_prefill_kivi2.cu): the keys' 2-bit codes as two bit planes times the
// block's per-channel scales plus its zeros, exact fp16 rows against the query digits, η as the
// decode kernel's kivi2 tensor-core bound; its unencoded (staged) blocks read exact.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/tier_b_form.h"

namespace witcert {

struct MeteredPrefillCudaArgs {
  const float* q = nullptr;       // [n, q_stride] device; row i holds heads [Hq, 128] at col 0
  int64_t q_stride = 0;           // floats
  int64_t num_rows = 0;           // n
  int64_t start_pos = 0;          // position of row 0 (> 0: earlier tokens are stored)
  const int32_t* block_table = nullptr;  // [max_blocks] device: the sequence's blocks
  int32_t max_blocks = 0;         // entries of block_table (covers start_pos + n tokens)
  int32_t num_q_heads = 0;
  bool meter = true;              // false: outputs only, cert untouched
  float* out = nullptr;           // [n, out_stride] device; heads [Hq, 128] at col 0
  int64_t out_stride = 0;
  meter::CertBound* cert = nullptr;  // [n, cert_row_stride] device; (row, head) at row·stride + h
  int64_t cert_row_stride = 0;
  // kivi2 only (required there): the exact-block table of MeteredDecodeCudaArgs, the same layout.
  // A block whose keys are not encoded yet (fewer than block_size tokens) must be listed, its rows
  // in exact_kv; listed blocks are read exact (ε̂ = ρ = 0, ‖ṽ‖ of the exact row).
  const int32_t* exact_slot = nullptr;  // [num_blocks, num_layers, Hkv] slot or −1, device
  const float* exact_kv = nullptr;      // [slots, 2 (K, V), block_size, d] fp32, device
  int32_t layer = 0, num_layers = 0;    // this layer (also int8-dither's hash), and the table's
  // int8-dither: the store's dither seed (the write path's) and the cell's Tier B failure
  // probability δ_loc (0: Tier A only, as MeteredDecodeCudaArgs::delta_loc).
  uint64_t dither_seed = 0;
  double delta_loc = 0.0;
  // int8-dither with δ_loc > 0: Tier B's form (MeteredDecodeCudaArgs::tier_b_form), split-max
  // over each row's whole context (the CPU reference's with one split).
  meter::TierBForm tier_b_form = meter::TierBForm::kPerToken;
};

// True when the kernel takes this pool and head count.
bool MeteredPrefillCudaSupports(const PagedKvLayout& layout, int32_t num_q_heads);

// Launches on `stream`; an error status for unsupported shapes or bad arguments (nothing
// is launched then).
CudaStatus MeteredPrefillCuda(const PagedKvLayout& layout, const PagedKvLayer& kv,
                              const MeteredPrefillCudaArgs& args, cudaStream_t stream);

}  // namespace witcert
