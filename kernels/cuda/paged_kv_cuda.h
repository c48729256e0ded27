// The paged GPU KV pool of one layer and its write path (quantize-on-write + witness).
//
// Layout (why): the decode kernel reads, for one (sequence, KV head), a run of tokens of
// each block. Keeping the codes of one (block, head) contiguous, separate from scales and
// witnesses, makes that run one contiguous span (block_size × code_bytes, e.g. 16 × 128 B
// for int8 d=128) that a warp reads with 8- or 16-byte coalesced loads, with no per-token
// header interleaved. Scales and witnesses are small separate arrays with the same indexing.
//   k_codes    [num_blocks, Hkv, block_size, CodeBytes(scheme, d)]   uint8
//   k_scales   [num_blocks, Hkv, block_size, ScalesPerVector]         bf16 bits, rounded up
//   k_witness  [num_blocks, Hkv, block_size, B]                       uint8 band codes c_b
//   k_witness_unit [num_blocks, Hkv, block_size]                      bf16 unit U (w_b ≤ c_b·U)
//   v_codes, v_scales  as for keys
//   v_summary  [num_blocks, Hkv, block_size, 2]                       bf16 ρ, ν, rounded up
// (witness formats: kernels/meter/witness_format.h).
//   k_group    [num_blocks, Hkv, d / 2, 2, 2]  kivi2 keys only: fp16 (zeros, scales) per channel pair
//              (KeyGroupWord)
//   k_outliers [num_blocks, Hkv, block_size, m] fp32, outlier channel bypass (m > 0) only
//   v_outliers the same for values
// Outlier channel bypass (engine/kv/outlier_channels.h): the m channels of each (layer, KV
// head, side) listed in OutlierTables are stored exact in *_outliers (channel order), the codec
// encodes the vector with those channels filled from their neighbours (so no scale sees them),
// and the witness is computed with the exact values put back (zero residual there). The
// tables are the engine's; the kernels only apply them. The CPU cache encodes a block once it
// is full when the bypass is on (its channels are chosen from the first full block); so does
// a caller here, keeping unfilled blocks exact (exact_slot) like kivi2's.
// kivi2 (group-encoded keys): a value's scale words are its fp16 (zero, scale); its keys have
// no per-vector scale but one group of parameters per (block, KV head), computed over the
// block's block_size tokens once the block is full (EncodeKeyGroupsCuda). Until then the
// block's keys are not in the pool: the caller keeps its rows exact and the decode kernel
// reads them from the exact-block table (MeteredDecodeCudaArgs::exact_slot), as the CPU cache
// reads an unfilled block exact.
// Byte formats are the CPU codecs' (engine/kv/codec_*.cc): the codes, scales and witnesses
// written here are bit-identical to KvCodec::Encode + ComputeKeyWitness / ComputeValueSummary
// (tested).
// Physical slot of a token: block_table[pos / block_size] * block_size + pos % block_size.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ops/rope_freq.h"
#include "kernels/cuda/kv_scheme_cuda.h"

namespace witcert {

struct PagedKvLayout {
  int64_t num_blocks = 0;
  int32_t num_kv_heads = 0;
  int32_t block_size = 16;
  int32_t head_dim = 128;     // 64..256, multiple of 32 (int4: group 32)
  int32_t num_bands = 8;      // B; (d/2) % B == 0, B ≤ 64
  bool interleaved = true;    // RoPE pairing of the band map
  KvScheme scheme = KvScheme::kFp16;  // K and V use the same scheme
  int32_t outlier_channels = 0;  // m: channels per (layer, KV head, side) stored exact; 0: off

  int32_t code_bytes() const { return CodeBytes(scheme, head_dim); }
  int32_t scales_per_vector(bool is_value) const { return ScalesPerVector(scheme, head_dim, is_value); }
  int32_t group_params_per_block() const { return GroupParamsPerBlock(scheme, head_dim); }
  bool group_keys() const { return SchemeInfo(scheme).group_keys; }
  bool has_witness() const { return !SchemeInfo(scheme).exact; }
  int32_t outliers() const { return has_witness() ? outlier_channels : 0; }  // exact schemes: none
  int64_t vectors() const { return num_blocks * num_kv_heads * block_size; }
  // Witness bytes per token: the key band witness (B codes + a bf16 unit) and the value
  // summary (two bf16).
  int32_t key_witness_bytes() const { return has_witness() ? num_bands + 2 : 0; }
  int32_t value_summary_bytes() const { return has_witness() ? 4 : 0; }
  // Bytes one block occupies for one KV head, K + V (codes + scales + witnesses + group
  // parameters).
  int64_t BytesPerBlockPerHead() const {
    const int64_t per_token = 2 * code_bytes() + 2 * scales_per_vector(false) + 2 * scales_per_vector(true) +
                              key_witness_bytes() + value_summary_bytes() + 8 * outliers();
    return block_size * per_token + 2 * group_params_per_block();
  }
  // The same per token (group parameters amortized over the block).
  double BytesPerTokenPerHead() const { return static_cast<double>(BytesPerBlockPerHead()) / block_size; }
};

// Device pointers of one layer (owned by PagedKvPoolCuda or by the caller).
struct PagedKvLayer {
  uint8_t* k_codes = nullptr;
  uint16_t* k_scales = nullptr;        // null when the scheme has no scale
  uint8_t* k_witness = nullptr;        // [vectors, B] band codes; null when the scheme is exact
  uint16_t* k_witness_unit = nullptr;  // [vectors] bf16 U; null when the scheme is exact
  uint8_t* v_codes = nullptr;
  uint16_t* v_scales = nullptr;
  uint16_t* v_summary = nullptr;       // [vectors, 2] bf16 (ρ, ν); null when the scheme is exact
  uint16_t* k_group = nullptr;    // null unless the scheme groups keys (kivi2)
  float* k_outliers = nullptr;    // null unless layout.outliers() > 0
  float* v_outliers = nullptr;
};

// One layer's outlier channels (OutlierChannels' tables), device; null when the bypass is off.
struct OutlierTables {
  const int32_t* channels = nullptr;  // [Hkv, 2 (K, V), m] ascending
  const int32_t* fill_src = nullptr;  // [Hkv, 2, d]: c itself, the channel that fills outlier c, or −1 (0)
};

// Owns the device memory of `num_layers` layers (one allocation per array per layer).
class PagedKvPoolCuda {
 public:
  PagedKvPoolCuda() = default;
  ~PagedKvPoolCuda();
  PagedKvPoolCuda(const PagedKvPoolCuda&) = delete;
  PagedKvPoolCuda& operator=(const PagedKvPoolCuda&) = delete;

  CudaStatus Init(const PagedKvLayout& layout, int32_t num_layers);
  const PagedKvLayout& layout() const { return layout_; }
  const PagedKvLayer& layer(int32_t l) const { return layers_[l]; }
  int32_t num_layers() const { return num_layers_; }

 private:
  PagedKvLayout layout_;
  int32_t num_layers_ = 0;
  PagedKvLayer* layers_ = nullptr;  // [num_layers], host array of device pointers
};

CudaStatus ValidateLayout(const PagedKvLayout& layout);

struct KvWriteArgs {
  const float* k = nullptr;          // [n, Hkv, d] fp32 post-RoPE, device
  const float* v = nullptr;          // [n, Hkv, d]
  const int64_t* slots = nullptr;    // [n] physical slot (block * block_size + offset), device; < 0: skipped
  const int64_t* positions = nullptr;// [n] token position (dither hash input), device
  int64_t num_tokens = 0;            // n
  int32_t layer = 0;                 // dither hash input
  uint64_t dither_seed = 0;
  OutlierTables outliers;            // required when layout.outliers() > 0
};

// Quantizes n tokens into their slots: codes, scales, the key band witness and the value
// summary in one kernel.
// kivi2: values only (keys wait for their block to fill: EncodeKeyGroupsCuda).
CudaStatus WriteKvCuda(const PagedKvLayout& layout, const PagedKvLayer& dst,
                       const KvWriteArgs& args, cudaStream_t stream);

// Everything the write's device code (kernels/cuda/kv_write_vector.cuh) needs, checked, with the
// layout's derived sizes and flags (host-only functions of the scheme table) resolved: what
// WriteKvCuda launches with, and what RopeSplitWriteKvCuda takes.
struct KvWritePlan {
  PagedKvLayout layout;
  PagedKvLayer dst;
  KvWriteArgs args;
  int32_t code_bytes = 0;
  int32_t num_outliers = 0;  // layout.outliers()
  int32_t nscale[2] = {0, 0};  // scale words per vector: [K, V]
  bool group_keys = false;
  bool has_witness = false;
};
CudaStatus PlanKvWriteCuda(const PagedKvLayout& layout, const PagedKvLayer& dst, const KvWriteArgs& args,
                           KvWritePlan* plan);

// The batched step's RoPE split and KV write as one kernel: q [n, Hq, d], k and v [n, Hkv, d]
// from the QKV projection's rows qkv [n, qkv_stride] (q heads, then k's, then v's; the bias
// already added), q and k rotated at plan.args.positions with `freq` — RopeSplitQkvCuda's bits — and each k
// and v vector then encoded into the pool from the warp's copy of it — WriteKvCuda's bits (the
// plan's args.k and args.v must be k and v). Saves the write's launch and its reads of k and v
// back from memory.
CudaStatus RopeSplitWriteKvCuda(const float* qkv, int64_t qkv_stride, int32_t num_heads, cuda_ops::RopeFreq freq,
                                bool interleaved, float* q, float* k, float* v, const KvWritePlan& plan,
                                cudaStream_t stream);

struct KeyGroupArgs {
  // The exact keys, from rows of k or from the exact table (k null):
  //   k: [rows, Hkv, d]; group g's token i is row first_rows[g] + i (first_rows null: g · block_size)
  //   exact table: the K rows of the slot exact_slot[(block · num_layers + layer) · Hkv + head]
  //     of exact_kv [slots, 2, block_size, d] (gate_repair_cuda.h); once the unit is encoded its
  //     entry is set to −1, so the decode kernel reads the encoded block from then on.
  const float* k = nullptr;
  const int32_t* first_rows = nullptr;  // [num_groups], device; optional
  int32_t* exact_slot = nullptr;
  const float* exact_kv = nullptr;
  int32_t layer = 0, num_layers = 0;    // of the exact table
  const int32_t* blocks = nullptr;   // [num_groups] physical block of each group (< 0: skipped), device
  int32_t num_groups = 0;
  OutlierTables outliers;            // required when layout.outliers() > 0
};

// Group-encoded keys (kivi2): encodes whole blocks — per-channel parameters over the block's
// block_size tokens, the codes and each key's band witness — bit-identical to the CPU
// codec's EncodeGroup + ComputeKeyWitness. One CTA per (group, KV head). Error for other schemes.
// A group whose block is < 0, or (exact table) whose unit has no slot, is skipped: callers
// replaying a captured launch pass a fixed num_groups and pad the list with −1.
CudaStatus EncodeKeyGroupsCuda(const PagedKvLayout& layout, const PagedKvLayer& dst,
                               const KeyGroupArgs& args, cudaStream_t stream);

}  // namespace witcert
