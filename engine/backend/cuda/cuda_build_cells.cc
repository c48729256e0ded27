// CudaBackend::BuildCells: the step's certificates on the host (cert_host_, out_norm_host_, and a
// repair step's checks and page-ins) into the engine's CellRecords, in the buffers kept from the
// step before (engine/backend/cell_buffers.h).
#include "engine/backend/cell_buffers.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "kernels/meter/cert_math.h"

namespace witcert {

void CudaBackend::BuildCells(absl::Span<const ForwardItem> batch, const std::vector<int64_t>& first_row,
                             int64_t s, const RepairStep& rstep, bool repair_step, ForwardResult* result) {
  const int32_t layers = config_.num_layers, hq = config_.num_heads;
  std::vector<int64_t> counts(batch.size(), 0);  // items reading stored KV with a policy: every cell
  for (size_t b = 0; b < batch.size(); ++b) {
    const ForwardItem& item = batch[b];
    if (item.policy != nullptr && item.start_pos != 0) counts[b] = layers * static_cast<int64_t>(item.tokens.size()) * hq;
  }
  ResetCellBuffers(counts, &result->cells);
  const bool tier_b_scheme = SchemeInfo(layout_.scheme).tier_b;
  for (size_t b = 0; b < batch.size(); ++b) {
    const ForwardItem& item = batch[b];
    if (counts[b] == 0 || !MeterOn(item)) continue;
    const int64_t len = static_cast<int64_t>(item.tokens.size());
    std::vector<CellRecord>& out = result->cells[b];
    const GatePolicy& p = *item.policy;
    // Parallel over (layer, row) ranges: each writes its own cells.
    cell_pool_->ParallelFor(layers * len, 256, [&](int64_t begin, int64_t end) {
      for (int64_t li = begin; li < end; ++li) {
        const int32_t layer = static_cast<int32_t>(li / len);
        const int64_t i = li % len;
        for (int32_t h = 0; h < hq; ++h) {
          const int64_t src = (int64_t{layer} * s + first_row[b] + i) * hq + h;
          const meter::CertBound& cb = cert_host_.get()[src];
          const float norm = out_norm_host_.get()[src];
          const float rel_v = meter::RelativeValueBound(cb.v_bound, norm);
          CellRecord& cell = out[(layer * len + i) * hq + h];
          cell.layer = layer;
          cell.head = h;
          cell.step = item.decode_step + i;
          cell.tier = tier_b_scheme && item.delta_loc > 0 ? 'B' : 'A';
          cell.tv_before = cell.tv_after = cb.tv;
          cell.v_before = cell.v_after = rel_v;
          if (repair_step) {
            const RepairStep::Cell& rc = rstep.cells[src];
            if (rc.flagged) {
              cell.tv_before = rc.tv_before;
              cell.v_before = rc.v_before;
            }
            cell.pageins = rc.pageins;
          }
          cell.certified = meter::CellCertified(cb.tv, rel_v, p.tv_threshold, p.v_threshold);
        }
      }
    });
  }
}

}  // namespace witcert
