// The engine-facing KV cache: paged pool + block tables + codecs + witnesses + write-through
// backing store + exact-block cache, behind one object.
//
// Storage: one byte array per layer, [num_blocks, block_size, num_kv_heads, slot] with
// slot = K codes | K witness (fp16 × B) | V codes | V witness; exact codecs carry no witness.
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
#include "engine/kv/backing_store.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/block_table.h"
#include "engine/kv/codec.h"
#include "engine/kv/exact_block_cache.h"
#include "engine/kv/witness.h"
#include "engine/model/model_config.h"

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
  int32_t outlier_channels = 0;   // not implemented yet: must be 0
  uint64_t dither_seed = 0;
  int64_t backing_store_bytes = int64_t{1} << 30;
  int64_t exact_cache_blocks = 256;  // (block, layer, kv head) entries
};

using SeqId = int64_t;

// One KV head's context decoded to fp32 rows: what the metered kernel reads.
struct GatheredHead {
  int64_t num_tokens = 0;
  std::vector<float> k, v;                  // [S, d]
  std::vector<float> k_witness, v_witness;  // [S, B]; empty when that side's codec is exact
  std::vector<float> k_dither_scale;        // [S]; empty unless the K codec is Tier B
  std::vector<uint8_t> token_exact;         // [S]; 1 where the row is an exact copy
};

struct KvCacheStats {
  int64_t writes = 0;
  int64_t promotions = 0;         // blocks paged into the exact cache
  int64_t exact_cache_hits = 0;   // promoted blocks read exact on a later gather
  BackingStoreStats backing;
};

class KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options);

  [[nodiscard]] absl::Status AddSequence(SeqId seq);                 // AlreadyExists
  [[nodiscard]] absl::Status Reserve(SeqId seq, int64_t num_tokens); // ResourceExhausted
  void FreeSequence(SeqId seq);
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

  int64_t num_free_blocks() const { return pool_.num_free(); }
  int64_t num_total_blocks() const { return pool_.num_total(); }
  // All layers, K+V, codes + scales + witnesses, per token.
  int64_t BytesPerToken() const;
  // BytesPerToken() of a cache that `options` would create (num_blocks is ignored); lets the
  // caller size the pool from a memory budget before creating it.
  static absl::StatusOr<int64_t> BytesPerTokenFor(const KvCacheOptions& options);
  int32_t block_size() const { return options_.block_size; }
  // One layer, one KV head: K slot and V slot bytes (codes + scales + witness).
  int32_t KBytesPerHead() const { return k_bytes_ + k_wit_bytes_; }
  int32_t VBytesPerHead() const { return v_bytes_ + v_wit_bytes_; }

  const KvCacheOptions& options() const { return options_; }
  const KvCodec& k_codec() const { return *k_codec_; }
  const KvCodec& v_codec() const { return *v_codec_; }
  const BandLayout& band_layout() const { return bands_; }
  KvCacheStats stats() const;
  const BlockPool& pool() const { return pool_; }

 private:
  struct Sequence {
    explicit Sequence(int32_t block_size, int32_t num_layers) : table(block_size, num_layers) {}
    BlockTable table;
  };
  KvCache(const KvCacheOptions& options, const KvCodec* k_codec, const KvCodec* v_codec);
  Sequence* Find(SeqId seq) const;
  uint8_t* Slot(int32_t layer, int32_t block, int32_t offset, int32_t kv_head) const;
  void DecodeRow(int32_t layer, int32_t block, int32_t offset, int32_t kv_head, int64_t pos,
                 GatheredHead* out, int64_t row) const;

  const KvCacheOptions options_;
  const KvCodec* k_codec_;
  const KvCodec* v_codec_;
  BandLayout bands_;
  int32_t k_bytes_, k_wit_bytes_, v_bytes_, v_wit_bytes_, slot_bytes_;
  BlockPool pool_;
  BackingStore backing_;
  ExactBlockCache exact_cache_;
  std::vector<std::unique_ptr<uint8_t[]>> storage_;  // [L] × [blocks, bs, Hkv, slot]
  mutable absl::Mutex seq_mu_;
  absl::flat_hash_map<SeqId, std::unique_ptr<Sequence>> seqs_ ABSL_GUARDED_BY(seq_mu_);
  std::atomic<int64_t> writes_{0}, promotions_{0}, exact_hits_{0};
};

}  // namespace witcert
