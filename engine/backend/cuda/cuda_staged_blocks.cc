// CudaBackend's staged blocks (group-encoded keys, kivi2): what a step writes where.
//
// A step's rows of one item cover tokens [start, start + len). For each block they touch:
//   - filled by these rows alone (start ≤ block start, block end ≤ start + len): its keys are
//     encoded from the step's K rows (a "row group");
//   - begun earlier (so staged) and filled now: the rows go to its stage, and the block is
//     encoded from the exact table (a "slot group"), which clears its entries;
//   - not filled by the step's end: staged (a stage acquired if the rows begin the block), and
//     the rows go to its stage.
// The values are written quantized by the ordinary write path in every case (their scales are
// per token); the decode kernel reads a staged block's K and V exact, as the CPU cache does.
// Encodes run after the layer's K/V write and before its attention, so a row reads a block the
// step fills as encoded, as on the CPU (which writes every row of a layer before attending).
//
// Outlier channels (cuda_backend.h): the same bookkeeping stages every block until the step
// that fills one first (StagingMode::until_first_fill). At each layer of that step the host
// chooses the channels from that block's exact rows, the tables go to the device and the
// layer's rows are written again with them: every block the step's rows fill alone, and every
// row that began a block after the choice, is then encoded as the CPU encodes it. A staged
// block that fills (now or later) is taken out of the exact table and written through the write
// path (keys and values; kivi2's keys then group-encoded from those rows).
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/common/status.h"
#include "kernels/cuda/gate_repair_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"

namespace witcert {

StagedBlocks::StagingMode CudaBackend::StagingModeNow() const {
  const bool choosing = outliers_ != nullptr && !outliers_->chosen;
  return StagedBlocks::StagingMode{.stage_new = layout_.group_keys() || choosing,
                                   .until_first_fill = !layout_.group_keys() && choosing};
}

OutlierTables CudaBackend::LayerOutliers(int32_t layer) const {
  if (outliers_ == nullptr) return {};
  const int64_t per_layer = int64_t{config_.num_kv_heads} * 2;
  const int32_t* table = outliers_->table.get();
  return OutlierTables{.channels = table + layer * per_layer * layout_.outliers(),
                       .fill_src = table + config_.num_layers * per_layer * layout_.outliers() +
                                   layer * per_layer * layout_.head_dim};
}

absl::Status CudaBackend::ChooseOutlierChannels(int32_t layer, const float* k_rows, const float* v_rows,
                                                const StagedStep& step) {
  const int32_t bs = layout_.block_size, d = layout_.head_dim, hkv = config_.num_kv_heads;
  const int64_t row = int64_t{hkv} * d;
  std::vector<float> k(bs * row), v(bs * row);  // [bs, Hkv, d], the block's exact rows
  WITCERT_CUDA_OK(cudaStreamSynchronize(stream_));
  if (step.choose_row >= 0) {
    WITCERT_CUDA_OK(cudaMemcpy(k.data(), k_rows + step.choose_row * row, k.size() * 4, cudaMemcpyDeviceToHost));
    WITCERT_CUDA_OK(cudaMemcpy(v.data(), v_rows + step.choose_row * row, v.size() * 4, cudaMemcpyDeviceToHost));
  } else {  // from its stage: unit (block, layer, h) at exact_kv [slot, 2, bs, d]
    std::vector<int32_t> slots(hkv);
    const int64_t entry0 = (int64_t{step.choose_block} * config_.num_layers + layer) * hkv;
    WITCERT_CUDA_OK(cudaMemcpy(slots.data(), exact_.slot.get() + entry0, hkv * 4, cudaMemcpyDeviceToHost));
    std::vector<float> unit(exact_.shape.unit_floats());
    for (int32_t h = 0; h < hkv; ++h) {
      if (slots[h] < 0) return absl::InternalError("outlier channels: the first filled block is not staged");
      WITCERT_CUDA_OK(cudaMemcpy(unit.data(), exact_.kv.get() + slots[h] * exact_.shape.unit_floats(),
                                 unit.size() * 4, cudaMemcpyDeviceToHost));
      for (int32_t t = 0; t < bs; ++t) {
        std::copy_n(&unit[t * d], d, &k[t * row + h * d]);
        std::copy_n(&unit[(bs + t) * d], d, &v[t * row + h * d]);
      }
    }
  }
  OutlierChannels& oc = *outliers_->channels;
  oc.ChooseOnce(layer, k.data(), v.data(), bs);
  const OutlierTables dst = LayerOutliers(layer);
  const int64_t units = int64_t{hkv} * 2;
  WITCERT_CUDA_OK(cudaMemcpy(const_cast<int32_t*>(dst.channels), oc.channels(layer, 0, false),
                             units * layout_.outliers() * 4, cudaMemcpyHostToDevice));
  WITCERT_CUDA_OK(cudaMemcpy(const_cast<int32_t*>(dst.fill_src), oc.fill_sources(layer, 0, false), units * d * 4,
                             cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

void CudaBackend::NoteOutliersChosen() {
  if (outliers_ == nullptr || outliers_->chosen) return;
  bool all = true;
  for (int32_t l = 0; l < config_.num_layers; ++l) all = all && outliers_->channels->chosen(l);
  outliers_->chosen = all;
}

absl::Status CudaBackend::PlanStagedItem(const ForwardItem& item, const std::vector<int32_t>& blocks,
                                         int64_t row, StagedBlocks::StepEncodes* encodes,
                                         StagedBlocks::StagingMode* mode) {
  StagedState& st = *staged_;
  const int64_t end = item.start_pos + static_cast<int64_t>(item.tokens.size());
  const int32_t unstaged =
      st.blocks->PlanWrites(item.start_pos, end, layout_.block_size, blocks, row, encodes, &st.pending, mode);
  if (unstaged >= 0) {
    return absl::InternalError(absl::StrFormat(
        "sequence %d: block %d holds tokens from an earlier step but is not staged", item.seq, unstaged));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::EnsureExactTable() {
  if (exact_.slot.get() != nullptr) return absl::OkStatus();
  const int64_t entries = layout_.num_blocks * config_.num_layers * config_.num_kv_heads;
  RETURN_IF_ERROR(exact_.slot.Grow(entries));
  WITCERT_CUDA_OK(cudaMemsetAsync(exact_.slot.get(), 0xff, entries * sizeof(int32_t), stream_));  // all −1
  WITCERT_CUDA_OK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::ReallocExactRows(size_t floats, size_t keep, size_t offset) {
  DeviceArray<float> kv;
  RETURN_IF_ERROR(kv.Grow(floats));
  WITCERT_CUDA_OK(cudaStreamSynchronize(stream_));  // queued kernels may still read the old rows
  if (keep > 0) {
    WITCERT_CUDA_OK(cudaMemcpy(kv.get() + offset, exact_.kv.get(), keep * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  exact_.kv = std::move(kv);
  return absl::OkStatus();
}

absl::StatusOr<CudaBackend::StagedStep> CudaBackend::PackStagedStep(const StagedBlocks::StepEncodes& e,
                                                                   int32_t* host, const int32_t* dev, int64_t n,
                                                                   int64_t s, bool graph_step, bool any_staged) const {
  // At most one slot group per item reading stored KV (its first block), one row group per bs rows.
  if (static_cast<int64_t>(e.slot_blocks.size()) > s || static_cast<int64_t>(e.row_blocks.size()) > n) {
    return absl::InternalError("staged blocks: more group encodes than the step's lists hold");
  }
  std::copy(e.row_blocks.begin(), e.row_blocks.end(), host);
  std::copy(e.first_rows.begin(), e.first_rows.end(), host + n);
  int32_t* slots = std::copy(e.slot_blocks.begin(), e.slot_blocks.end(), host + 2 * n);
  std::fill(slots, host + 2 * n + s, -1);
  int32_t* first_pos = std::copy(e.slot_first_pos.begin(), e.slot_first_pos.end(), host + 2 * n + s);
  std::fill(first_pos, host + 2 * n + 2 * s, 0);
  StagedStep step;
  step.row_blocks = dev;
  step.first_rows = dev + n;
  step.slot_blocks = dev + 2 * n;
  step.slot_first_pos = dev + 2 * n + s;
  // Row groups come only from rows filling a block alone, so their count is fixed for a captured
  // graph's shape (decode-only: n when block_size is 1, else 0); slot groups vary from step to step,
  // and a graph step launches s of them while any block is staged (none is staged again once the
  // outlier channels are chosen).
  step.row_groups = static_cast<int32_t>(e.row_blocks.size());
  step.slot_groups = static_cast<int32_t>(graph_step && any_staged ? s : static_cast<int64_t>(e.slot_blocks.size()));
  PlanOutlierChoice(e, &step);
  return step;
}

absl::Status CudaBackend::PrepareStagedDevice() {
  StagedState& st = *staged_;
  const int64_t unit = exact_.shape.unit_floats();
  const int64_t stage_slots = int64_t{config_.num_layers} * config_.num_kv_heads;
  // At least one stage, so the table's pointer is never null.
  const int64_t needed = std::max(st.blocks->slots_end(), st.blocks->slot_base() + stage_slots) * unit;
  if (static_cast<size_t>(needed) > exact_.kv.size()) {  // grow ×2, keeping every slot's rows
    RETURN_IF_ERROR(ReallocExactRows(std::max<size_t>(needed, 2 * exact_.kv.size()), exact_.kv.size(), 0));
  }
  if (st.pending.empty()) return absl::OkStatus();
  const std::vector<TableUpdate> updates = LastUpdatePerEntry(&st.pending);
  RETURN_IF_ERROR(st.updates.Grow(updates.size()));
  RETURN_IF_ERROR(st.updates_host.Grow(updates.size()));
  // The host buffer is free: the previous step ended with a stream sync.
  std::copy(updates.begin(), updates.end(), st.updates_host.get());
  WITCERT_CUDA_OK(cudaMemcpyAsync(st.updates.get(), st.updates_host.get(), updates.size() * sizeof(TableUpdate),
                                  cudaMemcpyHostToDevice, stream_));
  WITCERT_KERNEL_OK(ApplyTableUpdatesCuda(st.updates.get(), static_cast<int32_t>(updates.size()),
                                          exact_.slot.get(), stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::WriteStagedLayer(int32_t layer, const float* k_rows, const float* v_rows,
                                           const int64_t* d_slots, const int64_t* d_pos, int64_t n,
                                           const StagedStep& step, bool rows_in_table) {
  if (!rows_in_table) {
    WITCERT_KERNEL_OK(UpdateCachedExactRowsCuda(exact_.shape, k_rows, v_rows, d_slots, n, layer, exact_.slot.get(),
                                                exact_.kv.get(), stream_));
  }
  const PagedKvLayer& dst = pool_.layer(layer);
  const OutlierTables outliers = LayerOutliers(layer);
  if (step.choose_block >= 0) {
    RETURN_IF_ERROR(ChooseOutlierChannels(layer, k_rows, v_rows, step));
    WITCERT_KERNEL_OK(WriteKvCuda(layout_, dst, TokenWrite(k_rows, v_rows, d_slots, d_pos, n, layer), stream_));
  }
  if (step.row_groups > 0 && layout_.group_keys()) {  // the outlier bypass wrote these with the rows
    WITCERT_KERNEL_OK(EncodeKeyGroupsCuda(
        layout_, dst,
        KeyGroupArgs{.k = k_rows, .first_rows = step.first_rows, .blocks = step.row_blocks,
                     .num_groups = step.row_groups, .outliers = outliers},
        stream_));
  }
  if (step.slot_groups > 0 && outliers_ != nullptr) {
    // Taken out of the exact table (their entries cleared), then written like fresh rows.
    const int64_t rows = int64_t{step.slot_groups} * layout_.block_size, kv_dim = config_.kv_dim();
    float* k = outliers_->rows.get();
    float* v = k + rows * kv_dim;
    int64_t* slots = outliers_->slot_pos.get();
    int64_t* positions = slots + rows;
    if (static_cast<size_t>(2 * rows * kv_dim) > outliers_->rows.size() ||
        static_cast<size_t>(2 * rows) > outliers_->slot_pos.size()) {
      return absl::InternalError("outlier channels: staged encodes beyond the step's scratch");
    }
    WITCERT_KERNEL_OK(TakeStagedBlocksCuda(exact_.shape, step.slot_blocks, step.slot_first_pos, step.slot_groups,
                                           layer, exact_.slot.get(), exact_.kv.get(), k, v, slots, positions,
                                           stream_));
    WITCERT_KERNEL_OK(WriteKvCuda(layout_, dst, TokenWrite(k, v, slots, positions, rows, layer), stream_));
    if (layout_.group_keys()) {  // first_rows null: group g is rows [g·bs, (g+1)·bs)
      WITCERT_KERNEL_OK(EncodeKeyGroupsCuda(
          layout_, dst,
          KeyGroupArgs{.k = k, .blocks = step.slot_blocks, .num_groups = step.slot_groups, .outliers = outliers},
          stream_));
    }
  } else if (step.slot_groups > 0) {
    WITCERT_KERNEL_OK(EncodeKeyGroupsCuda(
        layout_, dst,
        KeyGroupArgs{.exact_slot = exact_.slot.get(), .exact_kv = exact_.kv.get(), .layer = layer,
                     .num_layers = config_.num_layers, .blocks = step.slot_blocks,
                     .num_groups = step.slot_groups, .outliers = {}},
        stream_));
  }
  return absl::OkStatus();
}

}  // namespace witcert
