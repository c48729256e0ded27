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
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/common/status.h"
#include "kernels/cuda/gate_repair_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"

namespace witcert {

absl::Status CudaBackend::PlanStagedItem(const ForwardItem& item, const std::vector<int32_t>& blocks,
                                         int64_t row, StagedBlocks::StepEncodes* encodes) {
  StagedState& st = *staged_;
  const int64_t end = item.start_pos + static_cast<int64_t>(item.tokens.size());
  const int32_t unstaged =
      st.blocks->PlanWrites(item.start_pos, end, layout_.block_size, blocks, row, encodes, &st.pending);
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
                                                                   int64_t s, bool graph_step) const {
  // At most one slot group per item reading stored KV (its first block), one row group per bs rows.
  if (static_cast<int64_t>(e.slot_blocks.size()) > s || static_cast<int64_t>(e.row_blocks.size()) > n) {
    return absl::InternalError("staged blocks: more group encodes than the step's lists hold");
  }
  std::copy(e.row_blocks.begin(), e.row_blocks.end(), host);
  std::copy(e.first_rows.begin(), e.first_rows.end(), host + n);
  int32_t* slots = std::copy(e.slot_blocks.begin(), e.slot_blocks.end(), host + 2 * n);
  std::fill(slots, host + 2 * n + s, -1);
  StagedStep step;
  step.row_blocks = dev;
  step.first_rows = dev + n;
  step.slot_blocks = dev + 2 * n;
  // Row groups come only from rows filling a block alone, so their count is fixed for a captured
  // graph's shape (decode-only: n when block_size is 1, else 0); slot groups vary from step to step.
  step.row_groups = static_cast<int32_t>(e.row_blocks.size());
  step.slot_groups = static_cast<int32_t>(graph_step ? s : static_cast<int64_t>(e.slot_blocks.size()));
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
                                           const int64_t* d_slots, int64_t n, const StagedStep& step,
                                           bool rows_in_table) {
  if (!rows_in_table) {
    WITCERT_KERNEL_OK(UpdateCachedExactRowsCuda(exact_.shape, k_rows, v_rows, d_slots, n, layer, exact_.slot.get(),
                                                exact_.kv.get(), stream_));
  }
  const PagedKvLayer& dst = pool_.layer(layer);
  if (step.row_groups > 0) {
    WITCERT_KERNEL_OK(EncodeKeyGroupsCuda(
        layout_, dst,
        KeyGroupArgs{.k = k_rows, .first_rows = step.first_rows, .blocks = step.row_blocks,
                     .num_groups = step.row_groups, .outliers = {}},
        stream_));
  }
  if (step.slot_groups > 0) {
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
