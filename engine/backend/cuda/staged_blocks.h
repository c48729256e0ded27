// Host bookkeeping of the blocks the CUDA backend keeps exact because they cannot be encoded
// yet: a group-encoded scheme (kivi2) encodes a block's keys over all of its block_size tokens,
// and the outlier channel bypass (engine/kv/outlier_channels.h) chooses its channels from the
// first block that fills, so until then every block is staged. Until a staged block is full its
// rows live exact in the device exact table
// (kernels/cuda/gate_repair_cuda.h: exact_kv, exact_slot) and the decode kernel reads them from
// there (ε̂ = 0, ρ = 0), as the CPU cache reads a staged block (engine/kv/kv_cache.h).
//
// A staged block holds one stage: the exact rows of all its (layer, KV head) units, slots
//   base + stage · L · Hkv + layer · Hkv + kv_head   of exact_kv [slots, 2, block_size, d]
// (base: the slots in front that the gate's exact-block cache uses, 0 until it starts).
// Acquire lists the block's units in the table (updates for the device); the kernel that
// encodes the full block clears its table entries, layer by layer, and Retire gives the stage
// back once the step that encoded it is over (EndStep). A step that failed before EndStep may
// not have run its encodes: RecoverUnfinishedStep clears those blocks' entries instead. Drop
// forgets a block that is freed or reallocated while staged. Pure host logic, tested without
// a GPU.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cuda/gate_repair_cuda.h"

namespace witcert {

class StagedBlocks {
 public:
  StagedBlocks(int64_t num_blocks, int32_t num_layers, int32_t num_kv_heads);

  // The block's stage, or −1 when it is not staged.
  int32_t Find(int32_t block) const { return stage_of_block_[block]; }
  // A stage for the block, which must not be staged; its table entries go to `updates`.
  int32_t Acquire(int32_t block, std::vector<TableUpdate>* updates);
  // The block is full and is being encoded this step (the encode clears its entries); its
  // stage is free again after EndStep.
  void Retire(int32_t block);
  // The block was freed or reallocated: clears its entries (`updates`) and frees its stage.
  void Drop(int32_t block, std::vector<TableUpdate>* updates);
  // The step's device work is done: retired stages can be reused.
  void EndStep();
  // The group encodes a step's rows need, accumulated over the step's items.
  struct StepEncodes {
    std::vector<int32_t> row_blocks, first_rows;  // blocks the rows fill alone; their first row
    std::vector<int32_t> slot_blocks;             // staged blocks the rows fill (now retired)
    std::vector<int32_t> slot_first_pos;          // their first token's position
    // The first block the step fills, in plan order (the outlier bypass chooses from it): its
    // first row when the step's rows fill it alone, else −1 (a slot group: its rows are staged).
    int32_t first_filled_block = -1, first_filled_row = -1;
  };
  // Which blocks that are not staged yet PlanWrites stages.
  struct StagingMode {
    bool stage_new = true;  // rows that begin a block stage it until it fills
    // stage_new turns false after the first block that fills (the outlier bypass: once its
    // channels are chosen, from that block, new blocks are encoded token by token).
    bool until_first_fill = false;
  };
  // Plans one item's writes: rows [start, end) of a sequence whose physical blocks are
  // `blocks` (logical order), `first_row` its first row in the step. For each block the rows
  // touch: begun earlier and staged → its rows go to the stage, and once filled it is a slot
  // group, retired. Otherwise, while mode->stage_new: filled by the rows alone → a row group (a
  // stage it held from a rewrite is dropped); not filled → staged (acquired when the rows begin
  // it). Without stage_new such a block is written directly (a staged block filled alone by a
  // rewrite is dropped; one rewritten but not filled stays staged). Entry changes go to
  // `updates`. Returns the first block that holds tokens from an earlier step but is not staged
  // while mode->stage_new (an error of the caller's), else −1.
  int32_t PlanWrites(int64_t start, int64_t end, int32_t block_size, const std::vector<int32_t>& blocks,
                     int64_t first_row, StepEncodes* encodes, std::vector<TableUpdate>* updates,
                     StagingMode* mode);
  int32_t PlanWrites(int64_t start, int64_t end, int32_t block_size, const std::vector<int32_t>& blocks,
                     int64_t first_row, StepEncodes* encodes, std::vector<TableUpdate>* updates) {
    StagingMode always;
    return PlanWrites(start, end, block_size, blocks, first_row, encodes, updates, &always);
  }
  // Before a step: stages retired by a step that never reached EndStep are freed, their
  // blocks' entries cleared by `updates` (the encode may not have run; a later promotion of
  // the block must not be wiped, so this is not done after successful steps).
  void RecoverUnfinishedStep(std::vector<TableUpdate>* updates);
  // Moves every stage to start at slot `base` (the caller moves their rows): the staged
  // blocks' entries, listed again, go to `updates`. Between steps (no retired stage).
  void Rebase(int32_t base, std::vector<TableUpdate>* updates);
  int32_t slot_base() const { return base_; }
  // One past the last slot a stage in use may take: exact_kv holds at least this many slots.
  int64_t slots_end() const { return base_ + stages_needed() * int64_t{num_layers_} * num_kv_heads_; }

  int64_t staged() const { return staged_; }
  // Stages ever in use at once (slots_end() counts their slots).
  int64_t stages_needed() const { return static_cast<int64_t>(block_of_stage_.size()); }
  int64_t TableIndex(int32_t block, int32_t layer, int32_t kv_head) const {
    return (int64_t{block} * num_layers_ + layer) * num_kv_heads_ + kv_head;
  }

 private:
  void AppendEntries(int32_t block, int32_t stage, std::vector<TableUpdate>* updates) const;

  const int32_t num_layers_, num_kv_heads_;
  int32_t base_ = 0;
  std::vector<int32_t> stage_of_block_;  // [num_blocks], −1: not staged
  std::vector<int32_t> block_of_stage_;  // [stages], −1: free or retired
  std::vector<int32_t> free_;
  std::vector<std::pair<int32_t, int32_t>> retired_;  // (stage, block)
  int64_t staged_ = 0;
};

}  // namespace witcert
