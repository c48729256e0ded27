// KV capacity per scheme: bytes per token per KV head (K+V, codes + scales, with and without
// the Tier A witness) and tokens per GiB relative to an fp16 cache (the GPU's exact
// reference, which carries no witness there).
#include <cstdio>

#include "engine/kv/codec.h"
#include "engine/kv/witness.h"

int main() {
  using witcert::FindKvCodec;
  const int num_bands = 8;
  for (int d : {64, 128}) {
    std::printf("head_dim %d, B = %d bands (witness %d B per vector)\n", d, num_bands, 2 * num_bands);
    std::printf("%-14s %10s %12s %14s %12s\n", "scheme", "B/tok/head", "+witness", "tok/GiB/head",
                "vs fp16");
    const double fp16 = 2.0 * 2 * d;  // K + V, exact fp16 reference
    for (const std::string& name : witcert::RegisteredKvCodecs()) {
      const witcert::KvCodec& c = **FindKvCodec(name);
      if (!c.Validate(d).ok()) continue;
      const int raw = 2 * c.BytesPerVector(d);
      const int wit = c.is_exact() ? raw : raw + 2 * 2 * num_bands;
      std::printf("%-14s %10d %12d %14.0f %11.2fx\n", name.c_str(), raw, wit,
                  (1024.0 * 1024 * 1024) / wit, fp16 / wit);
    }
    std::printf("\n");
  }
  return 0;
}
