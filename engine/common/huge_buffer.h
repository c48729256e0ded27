// A zeroed heap buffer backed by transparent huge pages where the kernel offers them.
//
// Why: the KV pool and the packed weights are read end to end every decode step, and with
// 4 KiB pages every few KiB of those reads costs a TLB miss (a two-level page walk inside a
// VM). Aligning to 2 MiB and asking for MADV_HUGEPAGE before the first touch lets the kernel
// back the buffer with 2 MiB pages; where it cannot (THP off, other OS), the buffer is an
// ordinary zeroed allocation and nothing else changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace witcert {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HugeBuffer = std::unique_ptr<uint8_t[], FreeDeleter>;

// `bytes` zeroed bytes (null only when the allocation itself fails).
inline HugeBuffer AllocateHugeBuffer(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes == 0) return HugeBuffer();
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (p == nullptr) return HugeBuffer();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
#endif
  std::memset(p, 0, bytes);
  return HugeBuffer(static_cast<uint8_t*>(p));
}

}  // namespace witcert
