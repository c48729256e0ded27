// Which witness band a head dimension belongs to.
//
// A band is a run of whole RoPE rotation pairs: band b = pairs [b·d/(2B), (b+1)·d/(2B)),
// both dims of each pair. RoPE rotates inside a pair, so a band's norm is the same at every
// position — only if the pairing matches the model's (interleaved (2i,2i+1) or half-split
// (i, i+d/2)). Preconditions: head_dim even, (head_dim/2) % num_bands == 0.
#pragma once

#include <cstdint>

#include "kernels/meter/hd.h"

namespace witcert::meter {

WITCERT_HD inline int32_t BandOfDim(int32_t dim, int32_t head_dim, int32_t num_bands,
                                    bool interleaved) {
  int32_t half = head_dim / 2;
  int32_t pair = interleaved ? dim / 2 : (dim < half ? dim : dim - half);
  return pair / (half / num_bands);
}

}  // namespace witcert::meter
