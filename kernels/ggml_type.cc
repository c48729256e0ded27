#include "kernels/ggml_type.h"

namespace witcert {
static_assert(GgmlRowBytes(kGgmlQ4_1, 64) == 40);
static_assert(GgmlRowBytes(kGgmlQ6_K, 256) == 210);
}  // namespace witcert
