#include "engine/backend/cuda/staged_blocks.h"

namespace witcert {

StagedBlocks::StagedBlocks(int64_t num_blocks, int32_t num_layers, int32_t num_kv_heads)
    : num_layers_(num_layers), num_kv_heads_(num_kv_heads), stage_of_block_(num_blocks, -1) {}

void StagedBlocks::AppendEntries(int32_t block, int32_t stage, std::vector<TableUpdate>* updates) const {
  const int32_t units = num_layers_ * num_kv_heads_;
  for (int32_t layer = 0; layer < num_layers_; ++layer) {
    for (int32_t h = 0; h < num_kv_heads_; ++h) {
      const int32_t slot = stage < 0 ? -1 : base_ + stage * units + layer * num_kv_heads_ + h;
      updates->push_back(TableUpdate{.index = TableIndex(block, layer, h), .value = slot});
    }
  }
}

int32_t StagedBlocks::Acquire(int32_t block, std::vector<TableUpdate>* updates) {
  int32_t stage;
  if (!free_.empty()) {
    stage = free_.back();
    free_.pop_back();
  } else {
    stage = static_cast<int32_t>(block_of_stage_.size());
    block_of_stage_.push_back(-1);
  }
  block_of_stage_[stage] = block;
  stage_of_block_[block] = stage;
  ++staged_;
  AppendEntries(block, stage, updates);
  return stage;
}

void StagedBlocks::Retire(int32_t block) {
  const int32_t stage = stage_of_block_[block];
  if (stage < 0) return;
  stage_of_block_[block] = -1;
  block_of_stage_[stage] = -1;
  retired_.emplace_back(stage, block);
  --staged_;
}

void StagedBlocks::Drop(int32_t block, std::vector<TableUpdate>* updates) {
  const int32_t stage = stage_of_block_[block];
  if (stage < 0) return;
  AppendEntries(block, -1, updates);
  stage_of_block_[block] = -1;
  block_of_stage_[stage] = -1;
  free_.push_back(stage);
  --staged_;
}

void StagedBlocks::Rebase(int32_t base, std::vector<TableUpdate>* updates) {
  base_ = base;
  for (size_t stage = 0; stage < block_of_stage_.size(); ++stage) {
    if (block_of_stage_[stage] >= 0) AppendEntries(block_of_stage_[stage], static_cast<int32_t>(stage), updates);
  }
}

int32_t StagedBlocks::PlanWrites(int64_t start, int64_t end, int32_t block_size, const std::vector<int32_t>& blocks,
                                 int64_t first_row, StepEncodes* encodes, std::vector<TableUpdate>* updates,
                                 StagingMode* mode) {
  const int64_t bs = block_size;
  auto filled_now = [&](int32_t block, int32_t row) {
    if (encodes->first_filled_block < 0) {
      encodes->first_filled_block = block;
      encodes->first_filled_row = row;
    }
    if (mode->until_first_fill) mode->stage_new = false;
  };
  for (int64_t j = start / bs; j * bs < end; ++j) {
    const int32_t block = blocks[j];
    const int64_t lo = j * bs, hi = lo + bs;
    const bool filled = end >= hi;
    if (start > lo) {  // begun by an earlier step
      if (Find(block) < 0) {
        if (mode->stage_new) return block;
        continue;  // encoded token by token
      }
      if (filled) {
        encodes->slot_blocks.push_back(block);
        encodes->slot_first_pos.push_back(static_cast<int32_t>(lo));
        Retire(block);
        filled_now(block, -1);
      }
      continue;
    }
    if (filled) {
      Drop(block, updates);  // a rewrite of a staged block (no-op otherwise)
      if (!mode->stage_new) continue;
      const int32_t row = static_cast<int32_t>(first_row + (lo - start));
      encodes->row_blocks.push_back(block);
      encodes->first_rows.push_back(row);
      filled_now(block, row);
    } else if (Find(block) < 0 && mode->stage_new) {
      Acquire(block, updates);
    }
  }
  return -1;
}

void StagedBlocks::EndStep() {
  for (const auto& [stage, block] : retired_) free_.push_back(stage);
  retired_.clear();
}

void StagedBlocks::RecoverUnfinishedStep(std::vector<TableUpdate>* updates) {
  for (const auto& [stage, block] : retired_) AppendEntries(block, -1, updates);
  EndStep();
}

}  // namespace witcert
