// CudaBackend::FillKvSynthetic: seeded pseudo-random K/V written through the real write path
// (and, on request, the gate's host store) so benchmarks can time long contexts without a
// prefill. Staged schemes (kivi2): full blocks are encoded from the chunk's rows, the last
// unfilled block is staged (cuda_staged_blocks.cc). Outlier channels: chosen from the first
// chunk's first block, as a prompt's first step chooses them.
#include <algorithm>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/common/status.h"
#include "kernels/cuda/gate_repair_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"

namespace witcert {

absl::Status CudaBackend::FillKvSynthetic(SeqId seq, int64_t num_tokens, uint32_t seed,
                                          bool write_through) {
  WITCERT_CUDA_OK(cudaSetDevice(device_));
  if (write_through) RETURN_IF_ERROR(EnsureRepairState());
  std::vector<int32_t> blocks;
  RETURN_IF_ERROR(kv_->BlockIds(seq, &blocks));
  const int64_t bs = layout_.block_size, kv_dim = config_.kv_dim();
  if (num_tokens > static_cast<int64_t>(blocks.size()) * bs) {
    return absl::FailedPreconditionError("FillKvSynthetic: positions not reserved");
  }
  constexpr int64_t kChunk = 1024;  // tokens per write
  std::vector<float> host(2 * kChunk * kv_dim);  // [2, kChunk, kv_dim]: K then V
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (float& f : host) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) / (1 << 23);
  }
  DeviceArray<float> kv;
  DeviceArray<int64_t> slot_pos;  // [2, kChunk]: slots then positions
  DeviceArray<int32_t> entries;   // [kChunk] host-store entry per token (write_through)
  DeviceArray<int32_t> group_blocks;  // [kChunk / bs] staged schemes: the chunk's full blocks
  RETURN_IF_ERROR(kv.Grow(host.size()));
  RETURN_IF_ERROR(group_blocks.Grow(kChunk));
  RETURN_IF_ERROR(slot_pos.Grow(2 * kChunk));
  RETURN_IF_ERROR(entries.Grow(kChunk));
  std::vector<int32_t> ent(kChunk, -1);
  WITCERT_CUDA_OK(cudaMemcpy(kv.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  std::vector<int64_t> sp(2 * kChunk);
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kChunk) {
    const int64_t nt = std::min(kChunk, num_tokens - t0);
    for (int64_t i = 0; i < nt; ++i) {
      const int64_t pos = t0 + i;
      sp[i] = int64_t{blocks[pos / bs]} * bs + pos % bs;
      sp[kChunk + i] = pos;
    }
    WITCERT_CUDA_OK(cudaMemcpy(slot_pos.get(), sp.data(), sp.size() * 8, cudaMemcpyHostToDevice));
    // Staged schemes, as a prompt chunk plans them (StagedBlocks::PlanWrites): the chunk starts on
    // a block boundary (kChunk is a multiple of bs), so its full blocks are encoded from its rows,
    // group-major, and a last partial block is staged.
    StagedBlocks::StepEncodes encodes;
    StagedBlocks::StagingMode mode = StagingModeNow();
    if (staged_ != nullptr) {
      if (staged_->blocks->PlanWrites(t0, t0 + nt, static_cast<int32_t>(bs), blocks, 0, &encodes,
                                      &staged_->pending, &mode) >= 0) {
        return absl::InternalError("FillKvSynthetic: a chunk continues a block that is not staged");
      }
      if (!encodes.row_blocks.empty()) {
        WITCERT_CUDA_OK(cudaMemcpy(group_blocks.get(), encodes.row_blocks.data(), encodes.row_blocks.size() * 4,
                                   cudaMemcpyHostToDevice));
      }
      RETURN_IF_ERROR(PrepareStagedDevice());
    }
    if (write_through) {
      for (int64_t i = 0; i < nt; ++i) ent[i] = repair_->entries->Acquire(blocks[(t0 + i) / bs]);
      WITCERT_CUDA_OK(cudaMemcpy(entries.get(), ent.data(), nt * 4, cudaMemcpyHostToDevice));
    }
    for (int32_t layer = 0; layer < config_.num_layers; ++layer) {
      KvWriteArgs write;
      write.k = kv.get();
      write.v = kv.get() + kChunk * kv_dim;
      write.slots = slot_pos.get();
      write.positions = slot_pos.get() + kChunk;
      write.num_tokens = nt;
      write.layer = layer;
      write.dither_seed = dither_seed_;
      write.outliers = LayerOutliers(layer);
      WITCERT_KERNEL_OK(WriteKvCuda(layout_, pool_.layer(layer), write, stream_));
      if (staged_ != nullptr) {
        StagedStep step;
        step.row_blocks = group_blocks.get();
        // first_rows null: group g is rows [g·bs, (g+1)·bs) of the chunk.
        step.row_groups = static_cast<int32_t>(encodes.row_blocks.size());
        PlanOutlierChoice(encodes, &step);  // the chunk's first block: rows 0..
        RETURN_IF_ERROR(WriteStagedLayer(layer, write.k, write.v, write.slots, write.positions, nt, step,
                                         /*rows_in_table=*/false));
      }
      if (write_through) {
        WITCERT_KERNEL_OK(WriteThroughExactCuda(exact_.shape, write.k, write.v, write.slots,
                                                entries.get(), nt, layer, repair_->host_store,
                                                stream_));
      }
    }
    WITCERT_CUDA_OK(cudaStreamSynchronize(stream_));
    NoteOutliersChosen();
  }
  return absl::OkStatus();
}

}  // namespace witcert
