#include "engine/kv/kv_cache.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"

namespace witcert {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheOptions& o) {
  if (o.num_layers <= 0 || o.num_kv_heads <= 0 || o.head_dim <= 0 || o.block_size <= 0 ||
      o.num_blocks <= 0 || o.num_blocks > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError("KvCacheOptions: layers, heads, head_dim, block_size and "
                                      "num_blocks must be positive");
  }
  if (o.num_bands <= 0 || o.num_bands > 64 || o.head_dim % 2 != 0 ||
      (o.head_dim / 2) % o.num_bands != 0 || o.head_dim / o.num_bands > 512) {
    return absl::InvalidArgumentError(absl::StrCat("num_bands ", o.num_bands,
                                                   " must divide head_dim/2 = ", o.head_dim / 2));
  }
  if (o.outlier_channels != 0) {
    return absl::UnimplementedError("outlier channel bypass is not implemented yet");
  }
  ASSIGN_OR_RETURN(const KvCodec* k, FindKvCodec(o.k_scheme));
  ASSIGN_OR_RETURN(const KvCodec* v, FindKvCodec(o.v_scheme));
  RETURN_IF_ERROR(k->Validate(o.head_dim));
  RETURN_IF_ERROR(v->Validate(o.head_dim));
  return std::unique_ptr<KvCache>(new KvCache(o, k, v));
}

KvCache::KvCache(const KvCacheOptions& o, const KvCodec* k_codec, const KvCodec* v_codec)
    : options_(o),
      k_codec_(k_codec),
      v_codec_(v_codec),
      bands_{o.head_dim, o.num_bands, o.rope_pairing},
      k_bytes_(k_codec->BytesPerVector(o.head_dim)),
      k_wit_bytes_(k_codec->is_exact() ? 0 : bands_.witness_bytes()),
      v_bytes_(v_codec->BytesPerVector(o.head_dim)),
      v_wit_bytes_(v_codec->is_exact() ? 0 : bands_.witness_bytes()),
      slot_bytes_(k_bytes_ + k_wit_bytes_ + v_bytes_ + v_wit_bytes_),
      pool_(o.num_blocks),
      backing_(o.backing_store_bytes, o.num_layers, o.block_size, o.num_kv_heads, o.head_dim),
      exact_cache_(o.exact_cache_blocks) {
  const int64_t layer_bytes = o.num_blocks * o.block_size * o.num_kv_heads * slot_bytes_;
  for (int32_t l = 0; l < o.num_layers; ++l) storage_.emplace_back(new uint8_t[layer_bytes]());
}

absl::StatusOr<int64_t> KvCache::BytesPerTokenFor(const KvCacheOptions& options) {
  KvCacheOptions probe = options;
  probe.num_blocks = 1;
  probe.backing_store_bytes = 0;
  probe.exact_cache_blocks = 0;
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, Create(probe));
  return cache->BytesPerToken();
}

int64_t KvCache::BytesPerToken() const {
  return static_cast<int64_t>(options_.num_layers) * options_.num_kv_heads * slot_bytes_;
}

KvCache::Sequence* KvCache::Find(SeqId seq) const {
  absl::ReaderMutexLock lock(&seq_mu_);
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : it->second.get();
}

uint8_t* KvCache::Slot(int32_t layer, int32_t block, int32_t offset, int32_t kv_head) const {
  const int64_t idx = (static_cast<int64_t>(block) * options_.block_size + offset) *
                          options_.num_kv_heads + kv_head;
  return storage_[layer].get() + idx * slot_bytes_;
}

absl::Status KvCache::AddSequence(SeqId seq) {
  absl::MutexLock lock(&seq_mu_);
  if (seqs_.contains(seq)) return absl::AlreadyExistsError(absl::StrCat("sequence ", seq));
  seqs_[seq] = std::make_unique<Sequence>(options_.block_size, options_.num_layers);
  return absl::OkStatus();
}

absl::Status KvCache::Reserve(SeqId seq, int64_t num_tokens) {
  absl::MutexLock lock(&seq_mu_);
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("sequence ", seq));
  BlockTable& table = it->second->table;
  const int64_t need = (num_tokens + options_.block_size - 1) / options_.block_size;
  if (need <= table.num_blocks()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<int32_t> blocks, pool_.Allocate(need - table.num_blocks()));
  for (int32_t b : blocks) {
    backing_.OnAllocate(b);
    exact_cache_.InvalidateBlock(b);
    table.Append(b);
  }
  return absl::OkStatus();
}

void KvCache::FreeSequence(SeqId seq) {
  std::unique_ptr<Sequence> s;
  {
    absl::MutexLock lock(&seq_mu_);
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) return;
    s = std::move(it->second);
    seqs_.erase(it);
  }
  for (int32_t b : s->table.blocks()) {
    if (pool_.Release(b)) {
      backing_.MarkFinished(b);
      exact_cache_.InvalidateBlock(b);
    }
  }
}

absl::Status KvCache::Write(SeqId seq, int32_t layer, int64_t pos, const float* k,
                            const float* v) {
  Sequence* s = Find(seq);
  if (s == nullptr) return absl::NotFoundError(absl::StrCat("sequence ", seq));
  if (layer < 0 || layer >= options_.num_layers || pos < 0 ||
      pos >= s->table.capacity_tokens()) {
    return absl::OutOfRangeError(absl::StrCat("write layer ", layer, " pos ", pos, " beyond ",
                                              s->table.capacity_tokens(), " reserved tokens"));
  }
  const int32_t d = options_.head_dim;
  const int64_t logical = pos / options_.block_size;
  const int32_t offset = static_cast<int32_t>(pos % options_.block_size);
  const int32_t block = s->table.physical(logical);
  std::vector<float> xhat(d);  // [d]
  for (int32_t h = 0; h < options_.num_kv_heads; ++h) {
    uint8_t* slot = Slot(layer, block, offset, h);
    for (int side = 0; side < 2; ++side) {
      const KvCodec& codec = side == 0 ? *k_codec_ : *v_codec_;
      const float* x = (side == 0 ? k : v) + static_cast<int64_t>(h) * d;
      uint8_t* codes = side == 0 ? slot : slot + k_bytes_ + k_wit_bytes_;
      CodecContext ctx{options_.dither_seed, layer, h, pos, side == 1};
      codec.Encode(x, d, ctx, codes);
      if (codec.is_exact()) continue;
      codec.Decode(codes, d, ctx, xhat.data());
      uint16_t w[64];
      ComputeWitness(x, xhat.data(), bands_, w);
      std::memcpy(codes + codec.BytesPerVector(d), w, bands_.witness_bytes());
    }
  }
  // A rewritten token of a promoted block must not be served from the stale exact copy.
  if (s->table.IsExact(layer, logical)) {
    s->table.SetExact(layer, logical, false);
    exact_cache_.InvalidateBlock(block);
  }
  backing_.Write(block, layer, offset, k, v);
  writes_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

void KvCache::DecodeRow(int32_t layer, int32_t block, int32_t offset, int32_t kv_head,
                        int64_t pos, GatheredHead* out, int64_t row) const {
  const int32_t d = options_.head_dim, nb = options_.num_bands;
  const uint8_t* slot = Slot(layer, block, offset, kv_head);
  CodecContext kctx{options_.dither_seed, layer, kv_head, pos, false};
  k_codec_->Decode(slot, d, kctx, &out->k[row * d]);
  if (k_wit_bytes_ > 0) {
    uint16_t w[64];
    std::memcpy(w, slot + k_bytes_, k_wit_bytes_);
    DecodeWitness(w, nb, &out->k_witness[row * nb]);
  }
  if (!out->k_dither_scale.empty()) out->k_dither_scale[row] = k_codec_->DitherScale(slot, d);
  const uint8_t* vslot = slot + k_bytes_ + k_wit_bytes_;
  CodecContext vctx{options_.dither_seed, layer, kv_head, pos, true};
  v_codec_->Decode(vslot, d, vctx, &out->v[row * d]);
  if (v_wit_bytes_ > 0) {
    uint16_t w[64];
    std::memcpy(w, vslot + v_bytes_, v_wit_bytes_);
    DecodeWitness(w, nb, &out->v_witness[row * nb]);
  }
}

absl::Status KvCache::GatherHead(SeqId seq, int32_t layer, int32_t kv_head, int64_t context_len,
                                 GatheredHead* out) {
  Sequence* s = Find(seq);
  if (s == nullptr) return absl::NotFoundError(absl::StrCat("sequence ", seq));
  if (context_len > s->table.capacity_tokens() || layer < 0 || layer >= options_.num_layers ||
      kv_head < 0 || kv_head >= options_.num_kv_heads) {
    return absl::OutOfRangeError("GatherHead: context/layer/head out of range");
  }
  const int32_t d = options_.head_dim, nb = options_.num_bands, bs = options_.block_size;
  out->num_tokens = context_len;
  out->k.resize(context_len * d);
  out->v.resize(context_len * d);
  out->k_witness.assign(k_wit_bytes_ > 0 ? context_len * nb : 0, 0.0f);
  out->v_witness.assign(v_wit_bytes_ > 0 ? context_len * nb : 0, 0.0f);
  out->k_dither_scale.assign(k_codec_->tier() == Tier::kB ? context_len : 0, 0.0f);
  out->token_exact.assign(context_len, 0);
  for (int64_t lb = 0; lb * bs < context_len; ++lb) {
    const int32_t block = s->table.physical(lb);
    const int64_t begin = lb * bs, end = std::min<int64_t>(context_len, begin + bs);
    std::shared_ptr<const ExactBlock> exact;
    if (s->table.IsExact(layer, lb)) {
      exact = exact_cache_.Lookup(block, layer, kv_head);
      if (exact != nullptr) exact_hits_.fetch_add(1, std::memory_order_relaxed);
    }
    for (int64_t t = begin; t < end; ++t) {
      if (exact != nullptr) {
        std::memcpy(&out->k[t * d], &exact->k[(t - begin) * d], sizeof(float) * d);
        std::memcpy(&out->v[t * d], &exact->v[(t - begin) * d], sizeof(float) * d);
        out->token_exact[t] = 1;
      } else {
        DecodeRow(layer, block, static_cast<int32_t>(t - begin), kv_head, t, out, t);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> KvCache::PromoteBlock(SeqId seq, int32_t layer, int32_t kv_head,
                                           int64_t logical, GatheredHead* head) {
  Sequence* s = Find(seq);
  if (s == nullptr) return absl::NotFoundError(absl::StrCat("sequence ", seq));
  if (logical < 0 || logical >= s->table.num_blocks()) {
    return absl::OutOfRangeError("PromoteBlock: logical block out of range");
  }
  const int32_t block = s->table.physical(logical);
  const int32_t d = options_.head_dim, bs = options_.block_size;
  std::shared_ptr<const ExactBlock> exact = exact_cache_.Lookup(block, layer, kv_head);
  if (exact == nullptr) {
    auto fresh = std::make_shared<ExactBlock>();
    fresh->k.resize(static_cast<size_t>(bs) * d);
    fresh->v.resize(static_cast<size_t>(bs) * d);
    if (!backing_.Read(block, layer, kv_head, fresh->k.data(), fresh->v.data())) return false;
    exact = fresh;
    exact_cache_.Insert(block, layer, kv_head, exact);
    promotions_.fetch_add(1, std::memory_order_relaxed);
  }
  s->table.SetExact(layer, logical, true);
  if (head != nullptr) {
    const int64_t begin = logical * bs, end = std::min<int64_t>(head->num_tokens, begin + bs);
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(&head->k[t * d], &exact->k[(t - begin) * d], sizeof(float) * d);
      std::memcpy(&head->v[t * d], &exact->v[(t - begin) * d], sizeof(float) * d);
      head->token_exact[t] = 1;
    }
  }
  return true;
}

absl::Status KvCache::GatherExactHead(SeqId seq, int32_t layer, int32_t kv_head,
                                      int64_t context_len, float* k, float* v) {
  Sequence* s = Find(seq);
  if (s == nullptr) return absl::NotFoundError(absl::StrCat("sequence ", seq));
  const int32_t d = options_.head_dim, bs = options_.block_size;
  std::vector<float> kb(static_cast<size_t>(bs) * d), vb(static_cast<size_t>(bs) * d);  // [bs, d]
  for (int64_t lb = 0; lb * bs < context_len; ++lb) {
    if (!backing_.Read(s->table.physical(lb), layer, kv_head, kb.data(), vb.data())) {
      return absl::FailedPreconditionError(absl::StrCat("exact copy of block ", lb, " is gone"));
    }
    const int64_t begin = lb * bs, n = std::min<int64_t>(context_len - begin, bs);
    std::memcpy(k + begin * d, kb.data(), sizeof(float) * n * d);
    std::memcpy(v + begin * d, vb.data(), sizeof(float) * n * d);
  }
  return absl::OkStatus();
}

KvCacheStats KvCache::stats() const {
  KvCacheStats st;
  st.writes = writes_.load();
  st.promotions = promotions_.load();
  st.exact_cache_hits = exact_hits_.load();
  st.backing = backing_.stats();
  return st;
}

}  // namespace witcert
