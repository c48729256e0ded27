// The x8 grouped dot (packed_x8_group.h) on vpdpbusd, in two builds: AVX-VNNI's VEX-encoded
// instruction and AVX512-VNNI's 256-bit EVEX one (CPUs with AVX512-VNNI but no AVX-VNNI, such
// as Ice Lake servers, have only the latter). vpdpbusd adds the four u8·i8 products of each
// int32 lane into the accumulator in one instruction where AVX2 needs maddubs + madd (+ add),
// with no int16 intermediate: a Q4 block is 8 instructions per activation row instead of 16,
// a Q8_0 chunk 2 instead of 4. The lane sums are the same exact integers and the fp32 tail is
// shared, so the results are the AVX2 kernel's bits.
//
// The AVX512-VNNI build is its own translation unit (packed_x8_avx512vnni.cc): the shared
// header holds one private copy per file.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

// Everything the shared header includes, first: nothing outside it may be compiled under the
// target pragma below (an inline function built for a newer ISA could be the copy the
// linker keeps).
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/packed_x8.h"

#ifdef WITCERT_MATMUL_AVXVNNI
#pragma GCC push_options
#pragma GCC target("avxvnni")
#include "kernels/cpu/packed_x8_group.h"

namespace witcert::matmul_internal {
namespace {

struct AvxVnniDp {
  static __m256i Acc(__m256i acc, __m256i u, __m256i i) {
    return _mm256_dpbusd_avx_epi32(acc, u, i);
  }
};

}  // namespace

PackedDotFn DotPackedX8AvxVnni() { return DotPackedX8With<DpbusdPackedOps<AvxVnniDp>>; }

}  // namespace witcert::matmul_internal
#pragma GCC pop_options
#else
namespace witcert::matmul_internal {
PackedDotFn DotPackedX8AvxVnni() { return nullptr; }
}  // namespace witcert::matmul_internal
#endif
