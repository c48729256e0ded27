// WITCERT_HD marks functions shared by host code and CUDA kernels.
//
// Everything under kernels/meter/ is header-only, free of std:: calls that device code
// lacks, so the CPU reference and the CUDA kernels compile the very same arithmetic.
#pragma once

#if defined(__CUDACC__)
#define WITCERT_HD __host__ __device__
#else
#define WITCERT_HD
#endif

// max(acc, x) for an accumulator that is never NaN. There it equals fmaxf(acc, x) (a NaN x
// leaves acc unchanged), but on the host it compiles to a compare-and-select instead of a libm
// call: fmaxf's NaN and signed-zero rules keep GCC from inlining it in the meter's hot loops.
namespace witcert::meter {
WITCERT_HD inline float MaxAcc(float acc, float x) { return x > acc ? x : acc; }
}  // namespace witcert::meter
