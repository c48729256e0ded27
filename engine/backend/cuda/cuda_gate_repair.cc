// The gate's repair mode on the CUDA backend (see cuda_backend.h and docs/architecture.md). The
// CPU gate (engine/gate/metered_decode.cc) is the reference; the differences, all in what is
// paged, never in what is certified:
//  * rounds: each round every still-uncertified cell of a row with budget left picks its
//    riskiest block not yet exact (the CPU does the same one cell at a time), the picks are
//    paged in together and the rows re-run once;
//  * a block without an exact copy (store full) is skipped without spending budget (the CPU
//    finds out by trying);
//  * the exact cache evicts the least recently promoted unit (the CPU: least recently read).
// Every certificate still comes from the decode kernel over what it actually read.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/common/status.h"
#include "kernels/cuda/gate_repair_cuda.h"
#include "kernels/cuda/metered_decode_cuda.h"
#include "kernels/cuda/ops/transformer_ops_cuda.h"

namespace witcert {

void CudaBackend::BlockEvents::OnBlockAllocated(int32_t block, SeqId) {
  if (StagedState* st = backend_->staged_.get()) st->blocks->Drop(block, &st->pending);
  RepairState* r = backend_->repair_.get();
  if (r == nullptr) return;
  r->entries->OnAllocate(block);
  r->slots->InvalidateBlock(block, &r->pending);
}

void CudaBackend::BlockEvents::OnBlockFreed(int32_t block) {
  if (StagedState* st = backend_->staged_.get()) st->blocks->Drop(block, &st->pending);
  RepairState* r = backend_->repair_.get();
  if (r == nullptr) return;
  r->entries->OnFinished(block);
  r->slots->InvalidateBlock(block, &r->pending);
}

CudaBackend::RepairState::~RepairState() {
  if (copy_stream != nullptr) cudaStreamSynchronize(copy_stream);
  for (cudaEvent_t e : kv_ready) cudaEventDestroy(e);
  for (cudaEvent_t e : written) cudaEventDestroy(e);
  if (copy_stream != nullptr) cudaStreamDestroy(copy_stream);
  if (host_store != nullptr) cudaFreeHost(host_store);
}

CudaBackend::RepairStats CudaBackend::repair_stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_snapshot_;
}

void CudaBackend::SnapshotRepairStats() {
  if (repair_ == nullptr) return;
  RepairStats s = repair_->stats;
  s.cache_evictions = repair_->slots->evictions();
  s.store_entries_used = repair_->entries->used();
  s.store_evicted = repair_->entries->evicted();
  s.store_refused = repair_->entries->refused();
  const int64_t entry_bytes =
      exact_.shape.unit_floats() * 4 * exact_.shape.num_layers * exact_.shape.num_kv_heads;
  s.store_capacity_bytes = repair_->entries->num_entries() * entry_bytes;
  s.store_used_bytes = s.store_entries_used * entry_bytes;
  absl::MutexLock lock(&stats_mu_);
  stats_snapshot_ = s;
}

KvCacheStats CudaBackend::KvStats() {
  KvCacheStats k = kv_->stats();
  const RepairStats s = repair_stats();
  k.promotions = s.pageins;
  k.backing.capacity_bytes = s.store_capacity_bytes;
  k.backing.used_bytes = s.store_used_bytes;
  k.backing.entries = s.store_entries_used;
  k.backing.evicted_blocks = s.store_evicted;
  k.backing.refused_blocks = s.store_refused;
  k.backing.unrepairable_reads = s.unrepairable;
  return k;
}

absl::Status CudaBackend::EnsureRepairState() {
  if (repair_ != nullptr) return absl::OkStatus();
  auto r = std::make_unique<RepairState>();
  const int64_t unit_bytes = exact_.shape.unit_floats() * 4;
  const int64_t entry_bytes = unit_bytes * config_.num_layers * config_.num_kv_heads;
  // The configured store, capped at one entry per pool block. Pinned memory can run out (the
  // host's limit, not the config's): halve until it fits rather than fail the request; with
  // no store at all every block is unrepairable and counted as refused.
  int64_t entries = std::min<int64_t>(backing_store_bytes_ / entry_bytes, layout_.num_blocks);
  while (entries > 0) {
    void* p = nullptr;
    if (cudaHostAlloc(&p, static_cast<size_t>(entries * entry_bytes),
                      cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
      r->host_store = static_cast<float*>(p);
      break;
    }
    (void)cudaGetLastError();
    entries /= 2;
  }
  r->entries = std::make_unique<ExactEntryTable>(entries, layout_.num_blocks);
  const int64_t slots = std::max<int64_t>(exact_cache_blocks_, 0);
  r->slots = std::make_unique<ExactSlotCache>(slots, config_.num_layers, config_.num_kv_heads);
  RETURN_IF_ERROR(EnsureExactTable());
  // The cache takes exact_ slots [0, slots); staged blocks' stages (from slot 0 until now) move
  // up behind them.
  const int64_t staged_slots = staged_ != nullptr ? staged_->blocks->slots_end() : 0;
  const int64_t unit = exact_.shape.unit_floats();
  RETURN_IF_ERROR(ReallocExactRows(std::max<int64_t>(slots + staged_slots, 1) * unit, staged_slots * unit, slots * unit));
  if (staged_ != nullptr) staged_->blocks->Rebase(static_cast<int32_t>(slots), &staged_->pending);
  WITCERT_CUDA_OK(cudaStreamCreateWithFlags(&r->copy_stream, cudaStreamNonBlocking));
  r->kv_ready.resize(config_.num_layers);
  r->written.resize(config_.num_layers);
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    WITCERT_CUDA_OK(cudaEventCreateWithFlags(&r->kv_ready[l], cudaEventDisableTiming));
    WITCERT_CUDA_OK(cudaEventCreateWithFlags(&r->written[l], cudaEventDisableTiming));
  }
  WITCERT_CUDA_OK(cudaStreamSynchronize(stream_));
  repair_ = std::move(r);
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaBackend::Upload(const void* data, size_t bytes) {
  const size_t aligned = (bytes + 255) / 256 * 256;
  while (upload_chunk_ < upload_chunks_.size() &&
         upload_used_ + aligned > upload_chunks_[upload_chunk_]->capacity) {
    ++upload_chunk_;  // the rest of this chunk stays unused until the reset
    upload_used_ = 0;
  }
  if (upload_chunk_ == upload_chunks_.size()) {
    auto chunk = std::make_unique<UploadChunk>();
    const size_t last = upload_chunks_.empty() ? 0 : upload_chunks_.back()->capacity;
    chunk->capacity = std::max<size_t>({aligned, size_t{1} << 20, 2 * last});
    RETURN_IF_ERROR(chunk->host.Grow(chunk->capacity));
    RETURN_IF_ERROR(chunk->dev.Grow(chunk->capacity));
    upload_chunks_.push_back(std::move(chunk));
    upload_used_ = 0;
  }
  UploadChunk& c = *upload_chunks_[upload_chunk_];
  uint8_t* host = c.host.get() + upload_used_;
  uint8_t* dev = c.dev.get() + upload_used_;
  std::memcpy(host, data, bytes);
  WITCERT_CUDA_OK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_));
  upload_used_ += aligned;
  return static_cast<void*>(dev);
}

absl::Status CudaBackend::PrepareRepairDevice() {
  RepairState& r = *repair_;
  ResetUploads();  // the previous step ended with a stream sync
  if (r.write_pending) {  // the slices the copy stream reads are about to be rewritten
    WITCERT_CUDA_OK(cudaStreamWaitEvent(stream_, r.written[config_.num_layers - 1], 0));
    r.write_pending = false;
  }
  if (!r.pending.empty()) {
    const std::vector<TableUpdate> updates = LastUpdatePerEntry(&r.pending);
    ASSIGN_OR_RETURN(void* dev, Upload(updates.data(), updates.size() * sizeof(TableUpdate)));
    WITCERT_KERNEL_OK(ApplyTableUpdatesCuda(static_cast<const TableUpdate*>(dev),
                                            static_cast<int32_t>(updates.size()), exact_.slot.get(), stream_));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckLayer(int32_t layer, RepairStep& step,
                                     std::vector<int32_t>* flagged) {
  const int32_t hq = config_.num_heads;
  const int64_t cell0 = int64_t{layer} * step.s * hq;
  WITCERT_KERNEL_OK(FlagUncertifiedCuda(cert_.get() + cell0, out_norm_.get() + cell0,
                                        step.dev_tv_threshold, step.dev_v_threshold, step.s, hq,
                                        flagged_.get() + 1, flagged_.get(), stream_));
  WITCERT_CUDA_OK(cudaMemcpyAsync(flagged_host_.get(), flagged_.get(), (1 + step.s * hq) * 4,
                                  cudaMemcpyDeviceToHost, stream_));
  WITCERT_CUDA_OK(cudaMemcpyAsync(cert_host_.get() + cell0, cert_.get() + cell0,
                                  step.s * hq * sizeof(meter::CertBound), cudaMemcpyDeviceToHost,
                                  stream_));
  WITCERT_CUDA_OK(cudaMemcpyAsync(out_norm_host_.get() + cell0, out_norm_.get() + cell0,
                                  step.s * hq * 4, cudaMemcpyDeviceToHost, stream_));
  WITCERT_CUDA_OK(cudaStreamSynchronize(stream_));
  ResetUploads();
  const int32_t count = flagged_host_.get()[0];
  flagged->assign(flagged_host_.get() + 1, flagged_host_.get() + 1 + count);
  std::sort(flagged->begin(), flagged->end());
  for (int32_t c : *flagged) {
    RepairStep::Cell& cell = step.cells[cell0 + c];
    if (cell.flagged) continue;
    const meter::CertBound& cb = cert_host_.get()[cell0 + c];
    const float norm = out_norm_host_.get()[cell0 + c];
    cell.flagged = true;
    cell.tv_before = cb.tv;
    cell.v_before = meter::RelativeValueBound(cb.v_bound, norm);
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RunExactRows(int32_t layer, const std::vector<int32_t>& rows,
                                       RepairStep& step) {
  const int32_t hq = config_.num_heads, d = config_.head_dim;
  const int64_t q_dim = config_.q_dim(), mb = step.max_blocks;
  const int64_t cell0 = int64_t{layer} * step.s * hq;
  // Rows with one δ_loc share a launch.
  std::vector<int32_t> order(rows);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return step.row_delta[a] < step.row_delta[b]; });
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin + 1;
    while (end < order.size() && step.row_delta[order[end]] == step.row_delta[order[begin]]) ++end;
    const int32_t nr = static_cast<int32_t>(end - begin);
    std::vector<int32_t> idx(order.begin() + begin, order.begin() + end);
    int64_t max_ctx = 1;
    for (int32_t r : idx) max_ctx = std::max<int64_t>(max_ctx, step.host_ctx[r]);
    ASSIGN_OR_RETURN(void* dev, Upload(idx.data(), idx.size() * 4));
    const auto* d_idx = static_cast<const int32_t*>(dev);
    WITCERT_KERNEL_OK(GatherRowsCuda(q_.get(), q_dim * 4, d_idx, nr, sub_q_.get(), stream_));
    WITCERT_KERNEL_OK(GatherRowsCuda(step.dev_tables, mb * 4, d_idx, nr, sub_tables_.get(), stream_));
    WITCERT_KERNEL_OK(GatherRowsCuda(step.dev_ctx, 4, d_idx, nr, sub_ctx_.get(), stream_));
    MeteredDecodeCudaArgs a;
    a.q = sub_q_.get();
    a.block_tables = sub_tables_.get();
    a.context_lens = sub_ctx_.get();
    a.batch = nr;
    a.num_q_heads = hq;
    a.max_blocks_per_seq = static_cast<int32_t>(mb);
    a.max_context = max_ctx;
    a.layer = layer;
    a.dither_seed = dither_seed_;
    a.delta_loc = step.row_delta[idx[0]];
    a.meter = true;
    a.kernel = 1;
    a.exact_slot = exact_.slot.get();
    a.exact_kv = exact_.kv.get();
    a.num_layers = config_.num_layers;
    a.outlier_channels = LayerOutliers(layer).channels;
    a.out = sub_out_.get();
    a.cert = sub_cert_.get();
    a.workspace = workspace_.get();
    a.workspace_bytes = workspace_.size();
    WITCERT_KERNEL_OK(MeteredDecodeCuda(layout_, pool_.layer(layer), a, stream_));
    WITCERT_KERNEL_OK(RowNormsCuda(sub_out_.get(), int64_t{nr} * hq, d, sub_norm_.get(), stream_));
    WITCERT_KERNEL_OK(ScatterRowsCuda(sub_out_.get(), q_dim * 4, d_idx, nr, attn_.get(), stream_));
    WITCERT_KERNEL_OK(ScatterRowsCuda(sub_cert_.get(), hq * sizeof(meter::CertBound), d_idx, nr,
                                      cert_.get() + cell0, stream_));
    WITCERT_KERNEL_OK(ScatterRowsCuda(sub_norm_.get(), hq * 4, d_idx, nr, out_norm_.get() + cell0,
                                      stream_));
    begin = end;
  }
  return absl::OkStatus();
}

namespace {
using Clock = std::chrono::steady_clock;
double Lap(Clock::time_point* t) {
  const Clock::time_point now = Clock::now();
  const double s = std::chrono::duration<double>(now - *t).count();
  *t = now;
  return s;
}
}  // namespace

absl::StatusOr<const int32_t*> CudaBackend::BeginRepairLayer(int32_t layer, RepairStep& step) {
  step.exact_rows.clear();
  for (int32_t row : step.repair_rows) {
    if (repair_->slots->Resident(step.row_seq[row], layer) > 0) step.exact_rows.push_back(row);
  }
  if (step.exact_rows.empty()) return step.dev_ctx;
  // A context of 0 makes every split of the row return at once; the merge writes garbage for
  // it, which the exact re-run's scatter overwrites (outputs, certificates and norms).
  std::vector<int32_t> ctx(step.host_ctx, step.host_ctx + step.s);
  for (int32_t row : step.exact_rows) ctx[row] = 0;
  ASSIGN_OR_RETURN(void* dev, Upload(ctx.data(), ctx.size() * 4));
  return static_cast<const int32_t*>(dev);
}

absl::Status CudaBackend::RepairLayer(int32_t layer, RepairStep& step) {
  RepairState& r = *repair_;
  Clock::time_point t = Clock::now();
  const int32_t hq = config_.num_heads, group = config_.group_size(), bs = layout_.block_size;
  const int64_t mb = step.max_blocks;
  // Rows whose sequence has exact units cached for this layer (skipped by the fast kernels).
  if (!step.exact_rows.empty()) RETURN_IF_ERROR(RunExactRows(layer, step.exact_rows, step));
  step.budget = step.row_budget;
  std::vector<int32_t> flagged;
  RETURN_IF_ERROR(CheckLayer(layer, step, &flagged));
  r.stats.check_s += Lap(&t);
  const int64_t cell0 = int64_t{layer} * step.s * hq;
  std::vector<uint8_t> unrepairable;  // [S · max_blocks] this layer
  while (true) {
    std::vector<int32_t> cells;  // flagged cells of rows with budget left
    for (int32_t c : flagged) {
      if (step.budget[c / hq] > 0) cells.push_back(c);
    }
    if (cells.empty()) break;
    // Rank: per-block risk of each cell, on the device.
    std::vector<int32_t> rows;
    for (int32_t c : cells) {
      if (rows.empty() || rows.back() != c / hq) rows.push_back(c / hq);
    }
    std::vector<int32_t> sub_cells(cells.size());
    for (size_t i = 0, j = 0; i < cells.size(); ++i) {
      while (rows[j] != cells[i] / hq) ++j;
      sub_cells[i] = static_cast<int32_t>(j) * hq + cells[i] % hq;
    }
    const int32_t nr = static_cast<int32_t>(rows.size()), nc = static_cast<int32_t>(cells.size());
    ASSIGN_OR_RETURN(void* dev_rows, Upload(rows.data(), rows.size() * 4));
    ASSIGN_OR_RETURN(void* dev_cells, Upload(sub_cells.data(), sub_cells.size() * 4));
    const auto* d_rows = static_cast<const int32_t*>(dev_rows);
    WITCERT_KERNEL_OK(GatherRowsCuda(q_.get(), config_.q_dim() * 4, d_rows, nr, sub_q_.get(), stream_));
    WITCERT_KERNEL_OK(GatherRowsCuda(step.dev_tables, mb * 4, d_rows, nr, sub_tables_.get(), stream_));
    WITCERT_KERNEL_OK(GatherRowsCuda(step.dev_ctx, 4, d_rows, nr, sub_ctx_.get(), stream_));
    RETURN_IF_ERROR(risk_.Grow(static_cast<size_t>(nc) * mb));
    RETURN_IF_ERROR(risk_host_.Grow(static_cast<size_t>(nc) * mb));
    BlockRiskArgs ra;
    ra.q = sub_q_.get();
    ra.block_tables = sub_tables_.get();
    ra.context_lens = sub_ctx_.get();
    ra.cells = static_cast<const int32_t*>(dev_cells);
    ra.num_cells = nc;
    ra.num_q_heads = hq;
    ra.max_blocks = static_cast<int32_t>(mb);
    ra.layer = layer;
    ra.dither_seed = dither_seed_;
    ra.exact_slot = exact_.slot.get();
    ra.num_layers = config_.num_layers;
    ra.risk = risk_.get();
    WITCERT_KERNEL_OK(BlockRiskCuda(layout_, pool_.layer(layer), ra, stream_));
    WITCERT_CUDA_OK(cudaMemcpyAsync(risk_host_.get(), risk_.get(), sizeof(float) * nc * mb,
                                    cudaMemcpyDeviceToHost, stream_));
    WITCERT_CUDA_OK(cudaStreamSynchronize(stream_));
    ResetUploads();
    ++r.stats.rounds;
    r.stats.rank_s += Lap(&t);
    // Pick: each cell its riskiest block that is not exact yet and has an exact copy.
    if (unrepairable.empty()) unrepairable.assign(static_cast<size_t>(step.s) * mb, 0);
    struct Pick {
      PageInOp op;
      int32_t block, kv_head;
    };
    std::vector<Pick> picks;
    std::vector<TableUpdate> updates;
    for (int32_t i = 0; i < nc; ++i) {
      const int32_t row = cells[i] / hq, g = (cells[i] % hq) / group;
      if (step.budget[row] <= 0) continue;
      const int64_t nblocks = (int64_t{step.host_ctx[row]} + bs - 1) / bs;
      const float* risk = risk_host_.get() + static_cast<int64_t>(i) * mb;
      const int32_t* table = step.host_tables + static_cast<int64_t>(row) * mb;
      int64_t best = -1;
      for (int64_t j = 0; j < nblocks; ++j) {
        if (unrepairable[row * mb + j] || r.slots->Find(table[j], layer, g) >= 0) continue;
        if (staged_ != nullptr && staged_->blocks->Find(table[j]) >= 0) continue;  // read exact already
        if (r.entries->Find(table[j]) < 0) {
          unrepairable[row * mb + j] = 1;
          ++r.stats.unrepairable;
          continue;
        }
        if (best < 0 || risk[j] > risk[best]) best = j;
      }
      if (best < 0) continue;
      const int32_t block = table[best];
      const int32_t slot = r.slots->Insert(block, layer, g, step.row_seq[row], &updates);
      if (slot < 0) continue;  // no exact cache
      Pick pick{.op = {}, .block = block, .kv_head = g};
      pick.op.src_unit = (int64_t{r.entries->Find(block)} * config_.num_layers + layer) *
                             config_.num_kv_heads + g;
      pick.op.table_index = r.slots->TableIndex(block, layer, g);
      pick.op.dst_slot = slot;
      picks.push_back(pick);
      --step.budget[row];
      ++step.cells[cell0 + cells[i]].pageins;
      ++r.stats.pageins;
    }
    // A unit evicted by a later pick of this round must not be paged in over its new owner.
    std::vector<PageInOp> ops;
    for (const Pick& p : picks) {
      if (r.slots->Find(p.block, layer, p.kv_head) == p.op.dst_slot) ops.push_back(p.op);
    }
    if (ops.empty()) break;
    if (!updates.empty()) {
      ASSIGN_OR_RETURN(void* dev, Upload(updates.data(), updates.size() * sizeof(TableUpdate)));
      WITCERT_KERNEL_OK(ApplyTableUpdatesCuda(static_cast<const TableUpdate*>(dev),
                                              static_cast<int32_t>(updates.size()),
                                              exact_.slot.get(), stream_));
    }
    ASSIGN_OR_RETURN(void* dev_ops, Upload(ops.data(), ops.size() * sizeof(PageInOp)));
    // The copies read the host store: this layer's write-through must have landed.
    WITCERT_CUDA_OK(cudaStreamWaitEvent(stream_, r.written[layer], 0));
    WITCERT_KERNEL_OK(PageInExactCuda(exact_.shape, r.host_store, static_cast<const PageInOp*>(dev_ops),
                                      static_cast<int32_t>(ops.size()), exact_.kv.get(),
                                      exact_.slot.get(), stream_));
    RETURN_IF_ERROR(RunExactRows(layer, rows, step));
    RETURN_IF_ERROR(CheckLayer(layer, step, &flagged));
    r.stats.rerun_s += Lap(&t);
  }
  return absl::OkStatus();
}

}  // namespace witcert
