// KV capacity per scheme, from the cache's own accounting (KvCache::CapacityFor): bytes per
// token per KV head (K+V: codes + scales + kivi2 group parameters amortized over the block,
// with and without the Tier A witness) and tokens per GiB relative to an fp16 cache without a
// witness (the GPU's exact reference).
//   kv_capacity [block_size]
#include <cstdio>
#include <cstdlib>

#include "engine/kv/codec.h"
#include "engine/kv/kv_cache.h"

int main(int argc, char** argv) {
  using namespace witcert;
  const int block_size = argc > 1 ? std::atoi(argv[1]) : 16;
  const int num_bands = 8;
  for (int d : {64, 128}) {
    std::printf("head_dim %d, block %d tokens, B = %d bands\n\n", d, block_size, num_bands);
    std::printf("| scheme | B/tok/KV head, no witness | with witness | tokens/GiB per KV head "
                "| vs fp16 |\n| --- | --- | --- | --- | --- |\n");
    const double fp16 = 2.0 * 2 * d;  // K + V, exact fp16 reference
    for (const std::string& name : RegisteredKvCodecs()) {
      KvCacheOptions o;
      o.num_layers = 1;
      o.num_kv_heads = 1;
      o.head_dim = d;
      o.block_size = block_size;
      o.num_blocks = 1;
      o.num_bands = num_bands;
      o.k_scheme = o.v_scheme = name;
      o.backing_store_bytes = 0;
      o.exact_cache_blocks = 0;
      auto cap = KvCache::CapacityFor(o);
      if (!cap.ok()) continue;  // scheme not valid at this head_dim
      const double with = cap->bytes_per_token_per_kv_head;
      const double without = with - cap->k_witness_bytes - cap->v_witness_bytes;
      std::printf("| %s | %.1f | %.1f | %.0f | %.2f× |\n", name.c_str(), without, with,
                  (1024.0 * 1024 * 1024) / with, fp16 / with);
    }
    std::printf("\n");
  }
  return 0;
}
