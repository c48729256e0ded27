// The device side of the gate's repair mode (certificates.md §6; the CPU reference is
// engine/gate/metered_decode.cc): exact K/V written through to a pinned-host backing store,
// paged into a device exact-block cache, the per-step certificate check, and the per-block
// risk ranking that picks what to page in. The kernels know physical blocks, slots and rows,
// never requests; the CUDA backend (engine/backend/cuda) holds the bookkeeping.
//
// Units: one (physical block, layer, KV head) is the unit the gate promotes. Its exact copy is
// fp32 [2 (K, V), block_size, head_dim], in the host store at
//   unit (entry · num_layers + layer) · Hkv + kv_head   of   [entries, L, Hkv, 2, bs, d],
// and in the device cache at slot s of [slots, 2, bs, d]. The cache's lookup table is
//   exact_slot[(block · num_layers + layer) · Hkv + kv_head] = slot or −1.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/cert_math.h"

namespace witcert {

struct ExactUnitShape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t block_size = 16;
  int32_t head_dim = 128;  // multiple of 4
  WITCERT_HD int64_t unit_floats() const { return int64_t{2} * block_size * head_dim; }
};

// Host-store write-through of one layer's fresh rows: row r (k, v [n, Hkv·d] fp32 post-RoPE)
// goes to entry[r] (−1: the block has no entry, skipped) at offset slots[r] % block_size.
// `host_store` is device-accessible pinned memory (cudaHostAllocMapped).
CudaStatus WriteThroughExactCuda(const ExactUnitShape& shape, const float* k, const float* v,
                                 const int64_t* slots, const int32_t* entry, int64_t n,
                                 int32_t layer, float* host_store, cudaStream_t stream);

// Keeps cached exact blocks exact as they fill: row r is also written into the cache slot of
// its (block, layer, head) when it has one.
CudaStatus UpdateCachedExactRowsCuda(const ExactUnitShape& shape, const float* k, const float* v,
                                     const int64_t* slots, int64_t n, int32_t layer,
                                     const int32_t* exact_slot, float* exact_kv,
                                     cudaStream_t stream);

// The outlier bypass encodes a staged block through the write path once it fills
// (engine/backend/cuda/cuda_staged_blocks.cc). Group g takes block blocks[g] (< 0: padding of a
// captured launch's fixed list) out of the table at `layer`: its units' rows become rows
// g·bs + t of k and v [num_groups·bs, Hkv, d], slots[g·bs + t] = blocks[g]·bs + t and
// positions[g·bs + t] = first_pos[g] + t (padding, or a block without a slot: slot −1, which
// WriteKvCuda skips), and its entries are cleared, so the decode kernel reads the block encoded.
CudaStatus TakeStagedBlocksCuda(const ExactUnitShape& shape, const int32_t* blocks, const int32_t* first_pos,
                                int32_t num_groups, int32_t layer, int32_t* exact_slot, const float* exact_kv,
                                float* k, float* v, int64_t* slots, int64_t* positions, cudaStream_t stream);

// One page-in: host-store unit → cache slot, then exact_slot[table_index] = slot.
struct PageInOp {
  int64_t src_unit = 0;
  int64_t table_index = 0;
  int32_t dst_slot = 0;
  int32_t pad = 0;
};
// Runs `n` page-ins (device array `ops`) reading the mapped host store.
CudaStatus PageInExactCuda(const ExactUnitShape& shape, const float* host_store,
                           const PageInOp* ops, int32_t n, float* exact_kv, int32_t* exact_slot,
                           cudaStream_t stream);

// exact_slot[index[i]] = value[i] (evictions and invalidations: value −1).
struct TableUpdate {
  int64_t index = 0;
  int32_t value = -1;
  int32_t pad = 0;
};
CudaStatus ApplyTableUpdatesCuda(const TableUpdate* updates, int32_t n, int32_t* exact_slot,
                                 cudaStream_t stream);

// The per-step check: cell (r, h) of rows [0, rows) is flagged when its row has a threshold
// (tv_threshold[r] is not NaN) and it is not certified — tv ≤ tv_threshold[r] and, when
// v_threshold[r] > 0, ‖o − õ‖/‖õ‖ ≤ v_threshold[r] (the CPU gate's Certified()). Flagged cells
// are written as r · Hq + h to `flagged` in no particular order; *count (device) gets their
// number (it is zeroed first).
CudaStatus FlagUncertifiedCuda(const meter::CertBound* cert, const float* out_norm,
                               const float* tv_threshold, const float* v_threshold, int64_t rows,
                               int32_t num_q_heads, int32_t* flagged, int32_t* count,
                               cudaStream_t stream);

// dst row i = src row index[i] (rows of row_bytes, a multiple of 4).
CudaStatus GatherRowsCuda(const void* src, int64_t row_bytes, const int32_t* index, int32_t n,
                          void* dst, cudaStream_t stream);
// dst row index[i] = src row i.
CudaStatus ScatterRowsCuda(const void* src, int64_t row_bytes, const int32_t* index, int32_t n,
                           void* dst, cudaStream_t stream);

// Per-block risk of flagged cells: for cell i = (row, head) (cells[i] = row · Hq + head),
//   risk[i, j] = Σ_{t in logical block j, read quantized} e^{ℓ̃_t − m}·(e^{ε̂_t} − 1)
// with ℓ̃ the stored-key logit, ε̂ the Tier A witness bound and m a per-cell constant (the
// largest block's scale, so the top block scores about 1) — the CPU gate's ranking (each
// token's share of A − 1) up to a common factor. Blocks read exact score 0. One pass over the
// keys. Ranking only: nothing here enters a certificate.
struct BlockRiskArgs {
  const float* q = nullptr;              // [rows, Hq, d]
  const int32_t* block_tables = nullptr; // [rows, max_blocks]
  const int32_t* context_lens = nullptr; // [rows]
  const int32_t* cells = nullptr;        // [n]
  int32_t num_cells = 0;
  int32_t num_q_heads = 0;
  int32_t max_blocks = 0;
  int32_t layer = 0;
  uint64_t dither_seed = 0;
  const int32_t* exact_slot = nullptr;   // may be null (nothing cached)
  int32_t num_layers = 0;
  float* risk = nullptr;                 // [n, max_blocks]; past the row's blocks: untouched
};
CudaStatus BlockRiskCuda(const PagedKvLayout& layout, const PagedKvLayer& kv,
                         const BlockRiskArgs& args, cudaStream_t stream);

}  // namespace witcert
