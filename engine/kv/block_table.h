// One sequence's logical → physical block map, shared by all layers, plus the per-(layer,
// logical block) "exact" flag the gate sets when it promotes a block (certificates.md §6).
#pragma once

#include <cstdint>
#include <vector>

namespace witcert {

class BlockTable {
 public:
  BlockTable(int32_t block_size, int32_t num_layers)
      : block_size_(block_size), num_layers_(num_layers) {}

  void Append(int32_t block);
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t capacity_tokens() const { return num_blocks() * block_size_; }
  int32_t block_size() const { return block_size_; }
  int32_t physical(int64_t logical) const { return blocks_[logical]; }
  const std::vector<int32_t>& blocks() const { return blocks_; }

  bool IsExact(int32_t layer, int64_t logical) const {
    return exact_[logical * num_layers_ + layer] != 0;
  }
  void SetExact(int32_t layer, int64_t logical, bool exact) {
    exact_[logical * num_layers_ + layer] = exact ? 1 : 0;
  }

 private:
  int32_t block_size_;
  int32_t num_layers_;
  std::vector<int32_t> blocks_;  // [num_blocks] physical ids
  std::vector<uint8_t> exact_;   // [num_blocks, num_layers]
};

}  // namespace witcert
