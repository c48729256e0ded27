#include "engine/kv/kv_cache.h"

#include <algorithm>
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
  if (o.head_dim > 512) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", o.head_dim, " above 512"));
  }
  if (o.outlier_channels < 0 || o.outlier_channels >= o.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("outlier_channels ", o.outlier_channels,
                                                   " must be in [0, head_dim = ", o.head_dim,
                                                   ")"));
  }
  ASSIGN_OR_RETURN(const KvCodec* k, FindKvCodec(o.k_scheme));
  ASSIGN_OR_RETURN(const KvCodec* v_scheme, FindKvCodec(o.v_scheme));
  const KvCodec* v = v_scheme->ForValues();
  RETURN_IF_ERROR(k->Validate(o.head_dim));
  RETURN_IF_ERROR(v->Validate(o.head_dim));
  return std::unique_ptr<KvCache>(new KvCache(o, k, v));
}

KvCache::KvCache(const KvCacheOptions& o, const KvCodec* k_codec, const KvCodec* v_codec)
    : options_(o),
      k_codec_(k_codec),
      v_codec_(v_codec),
      bands_{o.head_dim, o.num_bands, o.rope_pairing},
      pool_(o.num_blocks),
      backing_(o.backing_store_bytes, o.num_layers, o.block_size, o.num_kv_heads, o.head_dim),
      exact_cache_(o.exact_cache_blocks),
      outliers_(o.num_layers, o.num_kv_heads, o.head_dim, o.outlier_channels) {
  const KvCodec* codecs[2] = {k_codec, v_codec};
  int32_t offset = 0, param_offset = 0;
  group_ = false;
  for (int side = 0; side < 2; ++side) {
    SideLayout& sl = side_[side];
    const KvCodec* c = codecs[side];
    sl.codec = c;
    sl.offset = offset;
    sl.code_bytes = c->BytesPerVector(o.head_dim);
    sl.outlier_bytes = c->is_exact() ? 0 : 4 * o.outlier_channels;
    sl.witness_bytes =
        c->is_exact() ? 0 : (side == 0 ? bands_.key_witness_bytes() : BandLayout::value_summary_bytes());
    sl.param_offset = param_offset;
    sl.param_bytes = c->group_encoded() ? c->GroupParamBytes(o.head_dim, o.block_size) : 0;
    offset += sl.slot_bytes();
    param_offset += sl.param_bytes;
    group_ = group_ || c->group_encoded();
  }
  slot_bytes_ = offset;
  group_param_bytes_ = param_offset;
  const int64_t layer_bytes = o.num_blocks * o.block_size * o.num_kv_heads * slot_bytes_;
  const int64_t param_bytes = o.num_blocks * o.num_kv_heads * group_param_bytes_;
  for (int32_t l = 0; o.host_storage && l < o.num_layers; ++l) {
    storage_.push_back(AllocateHugeBuffer(static_cast<size_t>(layer_bytes)));
    params_.emplace_back(param_bytes > 0 ? new uint8_t[param_bytes]() : nullptr);
  }
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::CreateProbe(const KvCacheOptions& options) {
  KvCacheOptions probe = options;
  probe.num_blocks = 1;
  probe.backing_store_bytes = 0;
  probe.exact_cache_blocks = 0;
  return Create(probe);
}

absl::StatusOr<KvCapacity> KvCache::CapacityFor(const KvCacheOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, CreateProbe(options));
  return cache->Capacity();
}

KvCapacity KvCache::Capacity() const {
  const KvCacheOptions& o = options_;
  KvCapacity c;
  c.k_code_bytes = side_[0].code_bytes;
  c.k_outlier_bytes = side_[0].outlier_bytes;
  c.k_witness_bytes = side_[0].witness_bytes;
  c.v_code_bytes = side_[1].code_bytes;
  c.v_outlier_bytes = side_[1].outlier_bytes;
  c.v_witness_bytes = side_[1].witness_bytes;
  c.k_group_param_bytes = side_[0].param_bytes;
  c.v_group_param_bytes = side_[1].param_bytes;
  c.block_size = o.block_size;
  c.bytes_per_token_per_kv_head =
      slot_bytes_ + static_cast<double>(group_param_bytes_) / o.block_size;
  c.bytes_per_block = BytesPerBlock();
  const bool stages = group_ || o.outlier_channels > 0;
  c.staging_bytes_per_block =
      stages ? 2 * int64_t{o.block_size} * o.num_kv_heads * o.head_dim * int64_t{sizeof(float)}
             : 0;
  c.fixed_bytes = outliers_.table_bytes();
  return c;
}

int64_t KvCache::BytesPerBlock() const {
  return static_cast<int64_t>(options_.num_layers) * options_.num_kv_heads *
         (static_cast<int64_t>(options_.block_size) * slot_bytes_ + group_param_bytes_);
}

absl::StatusOr<int64_t> KvCache::BytesPerTokenFor(const KvCacheOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, CreateProbe(options));
  return cache->BytesPerToken();
}

int64_t KvCache::BytesPerToken() const {
  return (BytesPerBlock() + options_.block_size - 1) / options_.block_size;
}

KvCache::Sequence* KvCache::Find(SeqId seq) const {
  absl::ReaderMutexLock lock(&seq_mu_);
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : it->second.get();
}

uint8_t* KvCache::Slot(int32_t layer, int32_t block, int32_t offset, int32_t kv_head) const {
  // [block, KV head, offset]: one (block, head)'s rows are contiguous, so gathering a head
  // streams block_size · slot_bytes_ bytes per block instead of a slice of every row.
  const int64_t idx =
      (static_cast<int64_t>(block) * options_.num_kv_heads + kv_head) * options_.block_size +
      offset;
  return storage_[layer].get() + idx * slot_bytes_;
}

uint8_t* KvCache::GroupParams(int32_t layer, int32_t block, int32_t kv_head, int side) const {
  const int64_t idx = static_cast<int64_t>(block) * options_.num_kv_heads + kv_head;
  return params_[layer].get() + idx * group_param_bytes_ + side_[side].param_offset;
}

void KvCache::PrefetchRows(int32_t layer, int32_t block, int32_t kv_head) const {
  const uint8_t* p = Slot(layer, block, 0, kv_head);
  const int64_t n = static_cast<int64_t>(options_.block_size) * slot_bytes_;
  for (int64_t i = 0; i < n; i += 64) __builtin_prefetch(p + i);
}

bool KvCache::NeedsStaging(int32_t layer) const {
  return group_ || !outliers_.chosen(layer);
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
  if (options_.prefix_caching) EvictForAllocation(need - table.num_blocks());
  ASSIGN_OR_RETURN(std::vector<int32_t> blocks, pool_.Allocate(need - table.num_blocks()));
  for (int32_t b : blocks) {
    backing_.OnAllocate(b);
    exact_cache_.InvalidateBlock(b);
    if (observer_ != nullptr) observer_->OnBlockAllocated(b, seq);
    table.Append(b);
  }
  return absl::OkStatus();
}

void KvCache::FreeSequence(SeqId seq) {
  absl::MutexLock lock(&seq_mu_);  // the sequence map and the prefix index
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const std::unique_ptr<Sequence> s = std::move(it->second);
  seqs_.erase(it);
  for (int32_t b : s->table.blocks()) {
    if (pool_.Release(b)) {
      OnBlockFreed(b);
    } else if (prefix_.Contains(b) && pool_.RefCount(b) == 1) {
      // Only the index holds it now: evictable, and so is its exact copy (AttachPrefix takes
      // the copy back before sharing the block again).
      prefix_.MarkIdle(b);
      backing_.MarkFinished(b);
    }
  }
}

void KvCache::OnBlockFreed(int32_t block) {
  backing_.MarkFinished(block);
  exact_cache_.InvalidateBlock(block);
  if (observer_ != nullptr) observer_->OnBlockFreed(block);
}

void KvCache::EvictForAllocation(int64_t n) {
  while (pool_.num_free() < n) {
    const int32_t b = prefix_.EvictOne();
    if (b < 0) return;
    if (pool_.Release(b)) OnBlockFreed(b);
  }
}

int64_t KvCache::num_free_blocks() const {
  if (!options_.prefix_caching) return pool_.num_free();
  absl::ReaderMutexLock lock(&seq_mu_);
  return pool_.num_free() + prefix_.num_idle();
}

absl::StatusOr<int64_t> KvCache::AttachPrefix(SeqId seq, absl::Span<const int32_t> tokens) {
  if (!options_.prefix_caching) return 0;
  absl::MutexLock lock(&seq_mu_);
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("sequence ", seq));
  Sequence& s = *it->second;
  if (s.table.num_blocks() != 0) {
    return absl::FailedPreconditionError("AttachPrefix on a sequence that already has blocks");
  }
  const int32_t bs = options_.block_size;
  const int64_t candidates = tokens.empty() ? 0 : (static_cast<int64_t>(tokens.size()) - 1) / bs;
  int32_t parent = -1;
  int64_t attached = 0;
  for (; attached < candidates; ++attached) {
    const int32_t b = prefix_.Find(parent, tokens.subspan(attached * bs, bs));
    // Its exact copy must still be there: the gate repairs from it, and the CPU backend's
    // prompt attention reads the prefix exact (so a hit computes what a miss would).
    if (b < 0 || (options_.host_storage && !backing_.Reclaim(b))) break;
    pool_.Share(b);
    prefix_.MarkBusy(b);
    s.table.Append(b);
    parent = b;
  }
  s.shared_blocks = attached;
  prefix_query_tokens_.fetch_add(static_cast<int64_t>(tokens.size()), std::memory_order_relaxed);
  prefix_hit_tokens_.fetch_add(attached * bs, std::memory_order_relaxed);
  return attached * bs;
}

void KvCache::PublishPrefix(SeqId seq, absl::Span<const int32_t> tokens, int64_t num_computed) {
  if (!options_.prefix_caching) return;
  const int32_t bs = options_.block_size;
  absl::MutexLock lock(&seq_mu_);
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Sequence& s = *it->second;
  const int64_t full =
      std::min<int64_t>(std::min<int64_t>(num_computed, static_cast<int64_t>(tokens.size())) / bs,
                        s.table.num_blocks());
  for (; s.shared_blocks < full; ++s.shared_blocks) {
    const int64_t lb = s.shared_blocks;
    const int32_t b = s.table.physical(lb);
    const int32_t parent = lb == 0 ? -1 : s.table.physical(lb - 1);
    if (options_.host_storage && !backing_.Has(b)) return;  // no exact copy: not worth sharing
    if (!prefix_.Insert(parent, tokens.subspan(lb * bs, bs), b)) return;  // listed elsewhere
    pool_.Share(b);  // the index's own reference
  }
}

absl::Status KvCache::BlockIds(SeqId seq, std::vector<int32_t>* out) const {
  absl::ReaderMutexLock lock(&seq_mu_);
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("sequence ", seq));
  *out = it->second->table.blocks();
  return absl::OkStatus();
}

absl::Status KvCache::Write(SeqId seq, int32_t layer, int64_t pos, const float* k,
                            const float* v) {
  if (storage_.empty()) return absl::FailedPreconditionError("KV cache has no host storage");
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
  if (logical < s->shared_blocks) {
    return absl::FailedPreconditionError(
        absl::StrCat("write at position ", pos, ": its block is shared through the prefix cache"));
  }
  const int32_t block = s->table.physical(logical);
  backing_.Write(block, layer, offset, k, v);
  if (s->staged[layer].contains(logical) || NeedsStaging(layer)) {
    RETURN_IF_ERROR(WriteStaged(*s, layer, logical, block, offset, k, v));
  } else {
    for (int32_t h = 0; h < options_.num_kv_heads; ++h) {
      EncodeRows(layer, block, h, 0, k + static_cast<int64_t>(h) * d, 1, offset, pos);
      EncodeRows(layer, block, h, 1, v + static_cast<int64_t>(h) * d, 1, offset, pos);
    }
  }
  // A rewritten token of a promoted block must not be served from the stale exact copy.
  if (s->table.IsExact(layer, logical)) {
    s->table.SetExact(layer, logical, false);
    exact_cache_.InvalidateBlock(block);
  }
  writes_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status KvCache::WriteStaged(Sequence& s, int32_t layer, int64_t logical, int32_t block,
                                  int32_t offset, const float* k, const float* v) {
  const int32_t bs = options_.block_size, d = options_.head_dim, hkv = options_.num_kv_heads;
  const int64_t row = static_cast<int64_t>(hkv) * d;
  auto& staged = s.staged[layer];
  auto it = staged.find(logical);
  if (it == staged.end()) {
    StagedBlock fresh;
    fresh.k.assign(bs * row, 0.0f);
    fresh.v.assign(bs * row, 0.0f);
    fresh.written.assign(bs, 0);
    const std::vector<uint8_t>& done = s.group_done[layer];
    if (logical < static_cast<int64_t>(done.size()) && done[logical]) {
      // Rewriting a token of an already encoded group: re-encode the whole group from its
      // exact copy (which already holds the new token).
      if (!backing_.Has(block)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot rewrite a token of encoded group ", logical, ": its exact copy is gone"));
      }
      std::vector<float> kb(static_cast<size_t>(bs) * d), vb(kb.size());  // [bs, d]
      for (int32_t h = 0; h < hkv; ++h) {
        if (!backing_.Read(block, layer, h, kb.data(), vb.data())) {
          return absl::FailedPreconditionError("exact copy vanished during a group rewrite");
        }
        for (int32_t t = 0; t < bs; ++t) {
          std::memcpy(&fresh.k[t * row + h * d], &kb[t * d], sizeof(float) * d);
          std::memcpy(&fresh.v[t * row + h * d], &vb[t * d], sizeof(float) * d);
        }
      }
      std::fill(fresh.written.begin(), fresh.written.end(), 1);
      fresh.num_written = bs;
    }
    it = staged.emplace(logical, std::move(fresh)).first;
  }
  StagedBlock& sb = it->second;
  std::memcpy(&sb.k[offset * row], k, sizeof(float) * row);
  std::memcpy(&sb.v[offset * row], v, sizeof(float) * row);
  if (!sb.written[offset]) {
    sb.written[offset] = 1;
    ++sb.num_written;
  }
  if (sb.num_written < bs) return absl::OkStatus();
  EncodeStaged(layer, block, logical, sb);
  staged.erase(it);
  if (group_) {
    std::vector<uint8_t>& done = s.group_done[layer];
    if (static_cast<int64_t>(done.size()) <= logical) done.resize(logical + 1, 0);
    done[logical] = 1;
  }
  return absl::OkStatus();
}

void KvCache::EncodeStaged(int32_t layer, int32_t block, int64_t logical,
                           const StagedBlock& sb) {
  const int32_t bs = options_.block_size, d = options_.head_dim, hkv = options_.num_kv_heads;
  if (outliers_.count() > 0) outliers_.ChooseOnce(layer, sb.k.data(), sb.v.data(), bs);
  std::vector<float> rows(static_cast<size_t>(bs) * d);  // [bs, d] one head, one side
  for (int32_t h = 0; h < hkv; ++h) {
    for (int side = 0; side < 2; ++side) {
      const std::vector<float>& src = side == 0 ? sb.k : sb.v;
      for (int32_t t = 0; t < bs; ++t) {
        std::memcpy(&rows[t * d], &src[(static_cast<int64_t>(t) * hkv + h) * d],
                    sizeof(float) * d);
      }
      EncodeRows(layer, block, h, side, rows.data(), bs, 0, logical * bs);
    }
  }
  groups_encoded_.fetch_add(1, std::memory_order_relaxed);
}

void KvCache::EncodeRows(int32_t layer, int32_t block, int32_t kv_head, int side,
                         const float* x, int32_t n, int32_t offset0, int64_t pos0) {
  const SideLayout& sl = side_[side];
  const KvCodec& codec = *sl.codec;
  const int32_t d = options_.head_dim, m = sl.outlier_bytes / 4;
  const bool is_value = side == 1;
  thread_local std::vector<float> filled, xhat;  // [n, d] outlier channels replaced; [d]
  const float* in = x;
  if (m > 0) {
    filled.resize(static_cast<size_t>(n) * d);
    for (int32_t i = 0; i < n; ++i) {
      outliers_.Fill(layer, kv_head, is_value, x + i * d, &filled[i * d]);
    }
    in = filled.data();
  }
  const int64_t stride = slot_bytes_;  // consecutive offsets of one (block, head)
  uint8_t* codes0 = Slot(layer, block, offset0, kv_head) + sl.offset;
  uint8_t* params = sl.param_bytes > 0 ? GroupParams(layer, block, kv_head, side) : nullptr;
  const CodecContext ctx{options_.dither_seed, layer, kv_head, pos0, is_value};
  codec.EncodeGroup(in, n, d, ctx, codes0, stride, params);
  if (codec.is_exact()) return;
  const int32_t* channels = m > 0 ? outliers_.channels(layer, kv_head, is_value) : nullptr;
  xhat.resize(d);
  for (int32_t i = 0; i < n; ++i) {
    uint8_t* codes = codes0 + i * stride;
    const float* xi = x + i * d;
    CodecContext row = ctx;
    row.pos = pos0 + i;
    codec.DecodeInGroup(codes, params, d, row, xhat.data());
    for (int32_t j = 0; j < m; ++j) {  // exact beside the codes: zero residual there
      xhat[channels[j]] = xi[channels[j]];
      std::memcpy(codes + sl.code_bytes + 4 * j, &xi[channels[j]], 4);
    }
    uint8_t* wit = codes + sl.code_bytes + sl.outlier_bytes;
    if (is_value) {
      ComputeValueSummary(xi, xhat.data(), bands_, wit);
    } else {
      ComputeKeyWitness(xi, xhat.data(), bands_, wit);
    }
  }
}

void KvCache::DecodeRows(int32_t layer, int32_t block, int32_t offset0, int32_t n, int32_t kv_head,
                         int64_t pos0, GatheredHead* out, int64_t row0) const {
  const int32_t d = options_.head_dim, nb = options_.num_bands;
  const uint8_t* slot0 = Slot(layer, block, offset0, kv_head);  // rows at stride slot_bytes_
  for (int side = 0; side < 2; ++side) {
    const SideLayout& sl = side_[side];
    const uint8_t* params =
        sl.param_bytes > 0 ? GroupParams(layer, block, kv_head, side) : nullptr;
    CodecContext ctx{options_.dither_seed, layer, kv_head, pos0, side == 1};
    const int32_t m = sl.outlier_bytes / 4;
    const int32_t* channels = m > 0 ? outliers_.channels(layer, kv_head, side == 1) : nullptr;
    float* x = (side == 0 ? out->k.data() : out->v.data()) + row0 * d;  // [n, d]
    // Where this side has witnesses: key band bounds [n, B], or value ρ and ν [n].
    const bool wit = sl.witness_bytes > 0;
    float* kw = wit && side == 0 ? out->k_witness.data() + row0 * nb : nullptr;
    float* vrho = wit && side == 1 ? out->v_rho.data() + row0 : nullptr;
    float* vbound = wit && side == 1 ? out->v_bound.data() + row0 : nullptr;
    float* dither_scale =
        side == 0 && !out->k_dither_scale.empty() ? &out->k_dither_scale[row0] : nullptr;
    const uint8_t* codes = slot0 + sl.offset;
    sl.codec->DecodeGroupRows(codes, slot_bytes_, n, params, d, ctx, x);  // ctx.pos = pos0: row 0's
    for (int32_t r = 0; r < n; ++r, codes += slot_bytes_, x += d) {
      for (int32_t j = 0; j < m; ++j)
        std::memcpy(&x[channels[j]], codes + sl.code_bytes + 4 * j, 4);
      const uint8_t* stored = codes + sl.code_bytes + sl.outlier_bytes;  // after codes, outliers
      if (kw != nullptr) DecodeKeyWitness(stored, nb, kw + static_cast<int64_t>(r) * nb);
      if (vrho != nullptr) DecodeValueSummary(stored, &vrho[r], &vbound[r]);
      if (dither_scale != nullptr) dither_scale[r] = sl.codec->DitherScale(codes, d);
    }
  }
}

absl::Status KvCache::GatherHead(SeqId seq, int32_t layer, int32_t kv_head, int64_t context_len,
                                 GatheredHead* out) {
  if (storage_.empty()) return absl::FailedPreconditionError("KV cache has no host storage");
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
  out->k_witness.assign(side_[0].witness_bytes > 0 ? context_len * nb : 0, 0.0f);
  out->v_rho.assign(side_[1].witness_bytes > 0 ? context_len : 0, 0.0f);
  out->v_bound.assign(side_[1].witness_bytes > 0 ? context_len : 0, 0.0f);
  out->k_dither_scale.assign(k_codec_->tier() == Tier::kB ? context_len : 0, 0.0f);
  out->token_exact.assign(context_len, 0);
  for (int64_t lb = 0; lb * bs < context_len; ++lb) {
    const int32_t block = s->table.physical(lb);
    const int64_t begin = lb * bs, end = std::min<int64_t>(context_len, begin + bs);
    auto staged = s->staged[layer].find(lb);
    if (staged != s->staged[layer].end()) {  // not encoded yet: exact rows, witness 0
      const int64_t row = static_cast<int64_t>(options_.num_kv_heads) * d;
      for (int64_t t = begin; t < end; ++t) {
        const int64_t src = (t - begin) * row + static_cast<int64_t>(kv_head) * d;
        std::memcpy(&out->k[t * d], &staged->second.k[src], sizeof(float) * d);
        std::memcpy(&out->v[t * d], &staged->second.v[src], sizeof(float) * d);
        out->token_exact[t] = 1;
      }
      continue;
    }
    if ((lb + 1) * bs < context_len) PrefetchRows(layer, s->table.physical(lb + 1), kv_head);
    std::shared_ptr<const ExactBlock> exact;
    if (s->table.IsExact(layer, lb)) {
      exact = exact_cache_.Lookup(block, layer, kv_head);
      if (exact != nullptr) exact_hits_.fetch_add(1, std::memory_order_relaxed);
    }
    if (exact == nullptr) {
      DecodeRows(layer, block, 0, static_cast<int32_t>(end - begin), kv_head, begin, out, begin);
      continue;
    }
    std::memcpy(&out->k[begin * d], exact->k.data(), sizeof(float) * (end - begin) * d);
    std::memcpy(&out->v[begin * d], exact->v.data(), sizeof(float) * (end - begin) * d);
    std::fill(out->token_exact.begin() + begin, out->token_exact.begin() + end, 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> KvCache::PromoteBlock(SeqId seq, int32_t layer, int32_t kv_head,
                                           int64_t logical, GatheredHead* head) {
  if (storage_.empty()) return absl::FailedPreconditionError("KV cache has no host storage");
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
  st.groups_encoded = groups_encoded_.load();
  st.backing = backing_.stats();
  st.prefix_query_tokens = prefix_query_tokens_.load();
  st.prefix_hit_tokens = prefix_hit_tokens_.load();
  if (options_.prefix_caching) {
    absl::ReaderMutexLock lock(&seq_mu_);
    st.prefix_cached_blocks = prefix_.num_blocks();
  }
  return st;
}

MeteredHeadInputs MeteredInputs(const KvCacheOptions& o, const GatheredHead& head,
                                const std::vector<float>& v_norm) {
  auto or_null = [](const auto& a) { return a.empty() ? nullptr : a.data(); };
  MeteredHeadInputs in;
  in.head_dim = o.head_dim;
  in.num_bands = o.num_bands;
  in.interleaved = o.rope_pairing == RopePairing::kInterleaved;
  in.num_tokens = head.num_tokens;
  in.k = head.k.data();
  in.v = head.v.data();
  in.k_witness = or_null(head.k_witness);
  in.v_rho = or_null(head.v_rho);
  in.v_bound = or_null(head.v_bound);
  in.k_dither_scale = or_null(head.k_dither_scale);
  in.token_exact = head.token_exact.data();
  in.v_norm = or_null(v_norm);
  return in;
}

}  // namespace witcert
