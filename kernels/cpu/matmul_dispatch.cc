// Run-time choice of the matmul's instruction-set variant.
//
// The build's baseline stays AVX2+FMA+F16C so one binary runs on every x86 server we
// target; faster integer dots (AVX-VNNI's 256-bit vpdpbusd, AVX512-VNNI's 512-bit one) are
// compiled per function and picked here once, from what the CPU reports. Because integer
// dots are exact and every variant keeps the AVX2 kernel's fp32 op order, the choice changes
// speed only, never results (the scalar fallback sums in another order and is the exception:
// it is only within the tested tolerance). WITCERT_CPU_KERNEL and a test hook force a
// variant so tests and benchmarks can compare them in one process.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

bool CpuHasAvx2() {
#if defined(WITCERT_MATMUL_AVX2)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool CpuHasAvxVnni() {
#if defined(WITCERT_MATMUL_AVXVNNI)
  return CpuHasAvx2() && __builtin_cpu_supports("avxvnni");
#else
  return false;
#endif
}

bool CpuHasAvx512Vnni() {
#if defined(WITCERT_MATMUL_AVX512)
  // libgcc's feature bits already account for the OS saving the zmm state (XCR0).
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// The best available variant at or below `k`.
CpuKernel Clamp(CpuKernel k) {
  for (int i = static_cast<int>(k); i > 0; --i) {
    if (CpuKernelAvailable(static_cast<CpuKernel>(i))) return static_cast<CpuKernel>(i);
  }
  return CpuKernel::kScalar;
}

CpuKernel FromEnvironment() {
  const char* env = std::getenv("WITCERT_CPU_KERNEL");
  if (env != nullptr) {
    for (CpuKernel k : kAllCpuKernels) {
      if (std::strcmp(env, CpuKernelName(k)) == 0) return Clamp(k);
    }
  }
  return Clamp(CpuKernel::kAvx512Vnni);
}

constexpr int kNoOverride = -1;
std::atomic<int> g_override{kNoOverride};

}  // namespace

const char* CpuKernelName(CpuKernel k) {
  switch (k) {
    case CpuKernel::kScalar:
      return "scalar";
    case CpuKernel::kAvx2:
      return "avx2";
    case CpuKernel::kAvxVnni:
      return "avxvnni";
    case CpuKernel::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

bool CpuKernelAvailable(CpuKernel k) {
  switch (k) {
    case CpuKernel::kScalar:
      return true;
    case CpuKernel::kAvx2:
      return CpuHasAvx2();
    case CpuKernel::kAvxVnni:
      return CpuHasAvxVnni();
    case CpuKernel::kAvx512Vnni:
      return CpuHasAvx512Vnni();
  }
  return false;
}

CpuKernel SelectedCpuKernel() {
  const int forced = g_override.load(std::memory_order_relaxed);
  if (forced != kNoOverride) return static_cast<CpuKernel>(forced);
  static const CpuKernel from_env = FromEnvironment();
  return from_env;
}

void SetCpuKernelOverride(CpuKernel k) {
  g_override.store(static_cast<int>(Clamp(k)), std::memory_order_relaxed);
}
void ClearCpuKernelOverride() { g_override.store(kNoOverride, std::memory_order_relaxed); }

RowDot RowDotFor(GgmlType type, CpuKernel k) {
  const bool scalar = k == CpuKernel::kScalar;
  const bool vnni = k == CpuKernel::kAvxVnni;
  const bool wide = k == CpuKernel::kAvx512Vnni;
  // Pick among the 32-element format's variants.
  auto q32 = [&](RowDotFn plain, RowDotFn sc, RowDotFn v, RowDotFn w) -> RowDot {
    if (scalar) return {sc, kMaxTile};
    if (vnni) return {v, kMaxTile};
    if (wide) return {w, kMaxWideTile};
    return {plain, kMaxTile};
  };
  switch (type) {
    case GgmlType::kF32:
      return {DotF32, kMaxTile};
    case GgmlType::kF16:
      return {DotF16, kMaxTile};
    case GgmlType::kBF16:
      return {DotBF16, kMaxTile};
    case GgmlType::kQ4_0:
      return q32(DotQ4_0, DotQ4_0Scalar, DotQ4_0Vnni, DotQ4_0Avx512);
    case GgmlType::kQ4_1:
      return q32(DotQ4_1, DotQ4_1Scalar, DotQ4_1Vnni, DotQ4_1Avx512);
    case GgmlType::kQ8_0:
      return q32(DotQ8_0, DotQ8_0Scalar, DotQ8_0Vnni, DotQ8_0Avx512);
    case GgmlType::kIQ4_NL:  // one AVX2 kernel for every SIMD variant, as Q5_0 / Q5_1
      return {scalar ? DotIQ4_NLScalar : DotIQ4_NL, kMaxTile};
    case GgmlType::kIQ4_XS:
      return {scalar ? DotIQ4_XSScalar : DotIQ4_XS, kMaxTile};
    case GgmlType::kQ5_0:  // one AVX2 kernel for every SIMD variant
      return {scalar ? DotQ5_0Scalar : DotQ5_0, kMaxTile};
    case GgmlType::kQ5_1:
      return {scalar ? DotQ5_1Scalar : DotQ5_1, kMaxTile};
    case GgmlType::kQ2_K:
      return {scalar ? DotQ2_KScalar : DotQ2_K, kMaxTile};
    case GgmlType::kQ3_K:
      return {scalar ? DotQ3_KScalar : DotQ3_K, kMaxTile};
    case GgmlType::kQ4_K:
      return {scalar ? DotQ4_KScalar : DotQ4_K, kMaxTile};
    case GgmlType::kQ5_K:
      return {scalar ? DotQ5_KScalar : DotQ5_K, kMaxTile};
    case GgmlType::kQ6_K:
      return {scalar ? DotQ6_KScalar : DotQ6_K, kMaxTile};
    default:
      return {};
  }
}

}  // namespace witcert::matmul_internal
