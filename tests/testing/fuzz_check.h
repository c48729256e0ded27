// The fuzz targets' invariant check: a libFuzzer target reports a broken invariant by crashing,
// so the input that broke it is saved as a reproducer.
#pragma once

#include <cstdlib>

namespace witcert::testing {

inline void FuzzCheck(bool ok) {
  if (!ok) std::abort();
}

}  // namespace witcert::testing
