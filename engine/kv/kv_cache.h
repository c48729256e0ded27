// The engine-facing KV cache: paged pool + block tables + codecs + witnesses + write-through
// backing store + exact-block cache, behind one object.
//
// Storage: one byte array per layer, [num_blocks, block_size, num_kv_heads, slot] with
// slot = K codes | K outliers (fp32 × m) | K witness (bf16 unit + B codes) | V codes |
// V outliers | V summary (bf16 ρ, ν); exact codecs carry neither outliers nor witness (m = 0:
// no outlier fields). Formats: engine/kv/witness.h.
// Group-encoded codecs (kivi2 keys) add one per-layer array of group parameters,
// [num_blocks, num_kv_heads, K params | V params]; other schemes have none.
//
// Staging: while a block cannot be encoded yet — its codec is group-encoded and the block is
// not full, or outlier channels are on and not yet chosen for the layer — its rows are kept
// exact per sequence and read exact (token_exact = 1, witness 0, ε = 0). The write that fills
// the block encodes it whole and computes its witnesses. A block that never fills (the tail
// of a sequence) stays exact; that memory is per sequence, see KvCapacity::staging_*.
//
// Concurrency: Write, GatherHead, PromoteBlock and GatherExactHead may run concurrently for
// DIFFERENT sequences (the backend parallelizes over sequences): they take the sequence map's
// reader lock only to find the sequence, then touch disjoint blocks. AddSequence, Reserve
// and FreeSequence take the writer lock; they must not race with calls on the same sequence.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/common/huge_buffer.h"
#include "engine/kv/backing_store.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/block_table.h"
#include "engine/kv/codec.h"
#include "engine/kv/exact_block_cache.h"
#include "engine/kv/outlier_channels.h"
#include "engine/kv/prefix_index.h"
#include "engine/kv/witness.h"
#include "engine/model/model_config.h"
#include "kernels/cpu/metered_attention.h"

namespace witcert {

struct KvCacheOptions {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  RopePairing rope_pairing = RopePairing::kInterleaved;
  int32_t block_size = 16;
  int64_t num_blocks = 0;
  std::string k_scheme = "fp16";
  std::string v_scheme = "fp16";
  int32_t num_bands = 8;
  int32_t outlier_channels = 0;   // m: top-m channels per (layer, KV head) kept exact
  uint64_t dither_seed = 0;
  int64_t backing_store_bytes = int64_t{1} << 30;
  int64_t exact_cache_blocks = 16384;  // (block, layer, kv head) entries
  // false: block accounting only (AddSequence / Reserve / FreeSequence / BlockIds); no host
  // code storage is allocated and Write / GatherHead / PromoteBlock return FailedPrecondition.
  // The CUDA backend keeps the codes on the device and uses this cache for its block tables.
  bool host_storage = true;
  // Automatic prefix caching (PrefixIndex): full blocks of finished prefill stay listed by
  // their tokens, and AttachPrefix lets a new sequence start from them.
  bool prefix_caching = false;
};

using SeqId = int64_t;

// One KV head's context decoded to fp32 rows: what the metered kernel reads.
struct GatheredHead {
  int64_t num_tokens = 0;
  std::vector<float> k, v;                  // [S, d]
  // Key band bounds c_b·U [S, B]; empty when the key codec is exact.
  std::vector<float> k_witness;
  // Value summary: ρ_t ≥ ‖v_t − ṽ_t‖ and ν_t ≥ ‖ṽ_t‖ + ρ_t [S]; empty when the value codec is exact.
  // Rows with token_exact set carry neither (0): readers use ρ = 0 and the row's own norm.
  std::vector<float> v_rho, v_bound;
  std::vector<float> k_dither_scale;        // [S]; empty unless the K codec is Tier B
  std::vector<uint8_t> token_exact;         // [S]; 1 where the row is an exact copy
};

// The metered kernel's view of a gathered head of a cache with options `o` (the arrays stay
// `head`'s; empty ones are null). v_norm: MeteredHeadInputs::v_norm [S], or empty.
MeteredHeadInputs MeteredInputs(const KvCacheOptions& o, const GatheredHead& head,
                                const std::vector<float>& v_norm = {});

// Exact storage accounting (all sizes in bytes).
struct KvCapacity {
  // Per (layer, KV head, token), each side: codes + scales, exact outlier values, witness.
  int32_t k_code_bytes = 0, k_outlier_bytes = 0, k_witness_bytes = 0;
  int32_t v_code_bytes = 0, v_outlier_bytes = 0, v_witness_bytes = 0;
  // Per (layer, KV head, block): group parameters (kivi2 keys), amortized over block_size.
  int32_t k_group_param_bytes = 0, v_group_param_bytes = 0;
  int32_t block_size = 0;
  // Everything above for one token of one KV head of one layer, group params / block_size
  // (exact: a fraction when block_size does not divide them).
  double bytes_per_token_per_kv_head = 0;
  int64_t bytes_per_block = 0;  // all layers and KV heads, exact
  // Exact fp32 rows held for one staged (not yet encoded) block of one layer of one sequence
  // (K+V, all KV heads); 0 when the schemes never stage.
  int64_t staging_bytes_per_block = 0;
  int64_t fixed_bytes = 0;  // outlier channel tables
};

struct KvCacheStats {
  int64_t writes = 0;
  int64_t promotions = 0;         // blocks paged into the exact cache
  int64_t exact_cache_hits = 0;   // promoted blocks read exact on a later gather
  int64_t groups_encoded = 0;     // staged blocks encoded whole (group codecs / outliers)
  BackingStoreStats backing;
  int64_t prefix_query_tokens = 0;   // prompt tokens looked up by AttachPrefix
  int64_t prefix_hit_tokens = 0;     // of those, found cached (attached, not recomputed)
  int64_t prefix_cached_blocks = 0;  // blocks listed in the prefix index now (busy or idle)
};

// Told of block lifetimes by KvCache (the CUDA backend keeps its gate's exact copies per
// physical block). Called from AddSequence / Reserve / FreeSequence, on the caller's thread,
// with the sequence map's lock held; must not call back into the cache.
class KvBlockObserver {
 public:
  virtual ~KvBlockObserver() = default;
  virtual void OnBlockAllocated(int32_t block, SeqId seq) = 0;
  virtual void OnBlockFreed(int32_t block) = 0;
};

class KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options);

  [[nodiscard]] absl::Status AddSequence(SeqId seq);                 // AlreadyExists
  [[nodiscard]] absl::Status Reserve(SeqId seq, int64_t num_tokens); // ResourceExhausted
  void FreeSequence(SeqId seq);
  // The physical block ids of `seq`, in logical order (NotFound for an unknown sequence).
  [[nodiscard]] absl::Status BlockIds(SeqId seq, std::vector<int32_t>* out) const;
  // k, v [num_kv_heads, head_dim] fp32 post-RoPE for token `pos` (< reserved tokens).
  [[nodiscard]] absl::Status Write(SeqId seq, int32_t layer, int64_t pos, const float* k,
                                   const float* v);

  // Decodes tokens [0, context_len) of one KV head; promoted blocks found in the exact cache
  // are read exact.
  [[nodiscard]] absl::Status GatherHead(SeqId seq, int32_t layer, int32_t kv_head,
                                        int64_t context_len, GatheredHead* out);
  // Pages logical block `logical` of (seq, layer, kv_head) in from the backing store, marks it
  // exact in the block table and overwrites its rows of `head` (if non-null) with the exact
  // copy. Returns false when the exact copy is gone (unrepairable).
  [[nodiscard]] absl::StatusOr<bool> PromoteBlock(SeqId seq, int32_t layer, int32_t kv_head,
                                                  int64_t logical, GatheredHead* head);
  // Exact K/V of tokens [0, context_len) of one head from the backing store: k, v [S, d].
  // FailedPrecondition when some block's exact copy is gone.
  [[nodiscard]] absl::Status GatherExactHead(SeqId seq, int32_t layer, int32_t kv_head,
                                             int64_t context_len, float* k, float* v);

  // Prefix caching (options().prefix_caching; otherwise both are no-ops returning 0).
  // AttachPrefix: for a sequence with no blocks yet, appends the longest chain of listed full
  // blocks that `tokens` starts with (never the block holding the last token, which must be
  // computed for its logits; never a block whose exact copy is gone) and returns how many
  // tokens they hold. Those positions are read-only for this sequence.
  [[nodiscard]] absl::StatusOr<int64_t> AttachPrefix(SeqId seq, absl::Span<const int32_t> tokens);
  // Lists the sequence's full blocks among its first `num_computed` tokens (every layer
  // written), extending its chain in the index. Call after each forward pass, never while a
  // Write to the same sequence may run (it moves the sequence's read-only boundary).
  void PublishPrefix(SeqId seq, absl::Span<const int32_t> tokens, int64_t num_computed);

  // Free blocks, counting listed blocks no sequence holds (they are evicted on demand).
  int64_t num_free_blocks() const;
  int64_t num_total_blocks() const { return pool_.num_total(); }
  // All layers, K+V, codes + scales + outliers + witnesses, per token; group parameters
  // amortized over block_size and rounded up (BytesPerBlock() is exact).
  int64_t BytesPerToken() const;
  int64_t BytesPerBlock() const;
  KvCapacity Capacity() const;
  static absl::StatusOr<KvCapacity> CapacityFor(const KvCacheOptions& options);
  // BytesPerToken() of a cache that `options` would create (num_blocks is ignored); lets the
  // caller size the pool from a memory budget before creating it.
  static absl::StatusOr<int64_t> BytesPerTokenFor(const KvCacheOptions& options);
  int32_t block_size() const { return options_.block_size; }
  // One layer, one KV head, one token: K slot and V slot bytes (codes + scales + outliers +
  // witness; group parameters excluded, see Capacity()).
  int32_t KBytesPerHead() const { return side_[0].slot_bytes(); }
  int32_t VBytesPerHead() const { return side_[1].slot_bytes(); }

  const KvCacheOptions& options() const { return options_; }
  const KvCodec& k_codec() const { return *k_codec_; }
  const KvCodec& v_codec() const { return *v_codec_; }
  const BandLayout& band_layout() const { return bands_; }
  KvCacheStats stats() const;
  const BlockPool& pool() const { return pool_; }
  // At most one observer (null to detach); it must outlive its registration.
  void set_block_observer(KvBlockObserver* observer) { observer_ = observer; }
  const OutlierChannels& outliers() const { return outliers_; }

 private:
  // A one-block cache with the options' layout and nothing beside it (no backing store, no exact
  // cache): what CapacityFor and BytesPerTokenFor measure.
  static absl::StatusOr<std::unique_ptr<KvCache>> CreateProbe(const KvCacheOptions& options);

  // One block's exact rows awaiting encoding.
  struct StagedBlock {
    std::vector<float> k, v;       // [block_size, Hkv, d] each
    std::vector<uint8_t> written;  // [block_size]
    int32_t num_written = 0;
  };
  struct Sequence {
    explicit Sequence(int32_t block_size, int32_t num_layers)
        : table(block_size, num_layers), staged(num_layers), group_done(num_layers) {}
    BlockTable table;
    // Per layer (layers of one sequence may be written concurrently: disjoint maps).
    std::vector<absl::flat_hash_map<int64_t, StagedBlock>> staged;  // [L] logical → rows
    std::vector<std::vector<uint8_t>> group_done;  // [L][logical]: encoded whole (group codec)
    // Logical blocks [0, shared_blocks) are listed in the prefix index (attached at admission
    // or published since): the sequence's chain there, read-only from then on.
    int64_t shared_blocks = 0;
  };
  // Where one side (K or V) lives inside a slot and in the group-parameter array.
  struct SideLayout {
    const KvCodec* codec = nullptr;
    int32_t offset = 0;         // of the codes inside the slot
    int32_t code_bytes = 0;     // BytesPerVector(d)
    int32_t outlier_bytes = 0;  // 4·m (0 for exact codecs)
    int32_t witness_bytes = 0;  // keys B + 2, values 4 (0 for exact codecs)
    int32_t param_offset = 0;   // inside one (block, head) record of the group-parameter array
    int32_t param_bytes = 0;    // GroupParamBytes(d, block_size)
    int32_t slot_bytes() const { return code_bytes + outlier_bytes + witness_bytes; }
  };
  KvCache(const KvCacheOptions& options, const KvCodec* k_codec, const KvCodec* v_codec);
  Sequence* Find(SeqId seq) const;
  uint8_t* Slot(int32_t layer, int32_t block, int32_t offset, int32_t kv_head) const;
  // Asks the CPU to start loading one (block, KV head)'s stored rows (the gather's next block:
  // the weights stream through the caches every step, so stored rows come from DRAM).
  void PrefetchRows(int32_t layer, int32_t block, int32_t kv_head) const;
  uint8_t* GroupParams(int32_t layer, int32_t block, int32_t kv_head, int side) const;
  bool NeedsStaging(int32_t layer) const;
  // Encodes rows x [n, d] of one side of one head into offsets [offset0, offset0 + n) of
  // `block` (a group codec needs n == block_size), then their outliers and witnesses.
  void EncodeRows(int32_t layer, int32_t block, int32_t kv_head, int side, const float* x,
                  int32_t n, int32_t offset0, int64_t pos0);
  // Encodes a full staged block (choosing outlier channels first if needed).
  void EncodeStaged(int32_t layer, int32_t block, int64_t logical, const StagedBlock& staged);
  // Stages token `offset` of `logical`; encodes the block when it is full.
  [[nodiscard]] absl::Status WriteStaged(Sequence& s, int32_t layer, int64_t logical,
                                         int32_t block, int32_t offset, const float* k,
                                         const float* v);
  // Decodes rows [offset0, offset0 + n) of one (block, KV head), positions pos0.., into
  // `out` rows row0.. (codes, outliers, witnesses, Tier B scales).
  void DecodeRows(int32_t layer, int32_t block, int32_t offset0, int32_t n, int32_t kv_head,
                  int64_t pos0, GatheredHead* out, int64_t row0) const;

  const KvCacheOptions options_;
  KvBlockObserver* observer_ = nullptr;
  const KvCodec* k_codec_;
  const KvCodec* v_codec_;
  BandLayout bands_;
  SideLayout side_[2];  // K, V
  int32_t slot_bytes_;
  int32_t group_param_bytes_;  // per (block, head), K + V
  bool group_;                 // some side is group-encoded
  BlockPool pool_;
  BackingStore backing_;
  ExactBlockCache exact_cache_;
  OutlierChannels outliers_;
  std::vector<HugeBuffer> storage_;                  // [L] × [blocks, Hkv, bs, slot]
  std::vector<std::unique_ptr<uint8_t[]>> params_;   // [L] × [blocks, Hkv, group params]
  // Evicts idle listed blocks into the pool until `n` blocks are free (or none is left).
  void EvictForAllocation(int64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(seq_mu_);
  // A block left the pool for good (refcount 0): drop its copies, tell the observer.
  void OnBlockFreed(int32_t block);

  mutable absl::Mutex seq_mu_;
  PrefixIndex prefix_ ABSL_GUARDED_BY(seq_mu_);
  std::atomic<int64_t> prefix_query_tokens_{0}, prefix_hit_tokens_{0};
  absl::flat_hash_map<SeqId, std::unique_ptr<Sequence>> seqs_ ABSL_GUARDED_BY(seq_mu_);
  std::atomic<int64_t> writes_{0}, promotions_{0}, exact_hits_{0}, groups_encoded_{0};
};

}  // namespace witcert
