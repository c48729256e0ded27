#include "engine/kv/block_table.h"

namespace witcert {

void BlockTable::Append(int32_t block) {
  blocks_.push_back(block);
  exact_.resize(exact_.size() + num_layers_, 0);
}

}  // namespace witcert
