// MeteredPrefillCuda: the arguments checked once, the launcher picked by scheme
// (metered_prefill_launch.h).
#include <cstdint>

#include "kernels/cuda/metered_prefill_cuda.h"
#include "kernels/cuda/metered_prefill_launch.h"

namespace witcert {
namespace {

// Schemes with a chunked-prefill kernel: int8's and int4's integer digits, the keys that are one exact
// 16-bit float per channel (times a per-token scale for fp8-e4m3), and kivi2's bit planes.
bool SchemeHasPrefillKernel(KvScheme s) {
  switch (s) {
    case KvScheme::kInt8Rtn:
    case KvScheme::kInt8Dither:
    case KvScheme::kInt4Rtn:
    case KvScheme::kFp16:
    case KvScheme::kBf16:
    case KvScheme::kFp8Raw:
    case KvScheme::kFp8Scaled:
    case KvScheme::kKivi2:
      return true;
    default:
      return false;
  }
}

}  // namespace

bool MeteredPrefillCudaSupports(const PagedKvLayout& L, int32_t num_q_heads) {
  const int32_t bs = L.block_size;
  return SchemeHasPrefillKernel(L.scheme) && L.head_dim == prefill::kD && L.num_bands == prefill::kBands &&
         bs >= 8 && L.outliers() == 0 && (bs & (bs - 1)) == 0 && L.num_kv_heads > 0 &&
         num_q_heads % L.num_kv_heads == 0 && num_q_heads >= L.num_kv_heads;
}

CudaStatus MeteredPrefillCuda(const PagedKvLayout& layout, const PagedKvLayer& kv,
                              const MeteredPrefillCudaArgs& args, cudaStream_t stream) {
  if (!MeteredPrefillCudaSupports(layout, args.num_q_heads)) {
    return CudaStatus::Error("MeteredPrefillCuda: takes int8-rtn, int8-dither, int4-rtn, fp16, bf16, fp8-e4m3 (raw or scaled) or kivi2 "
                             "without outlier channels, head_dim 128, 8 witness bands, a power-of-two "
                             "block_size >= 8 and Hq a multiple of Hkv");
  }
  if (args.num_rows <= 0) return CudaStatus::Ok();
  if (args.q == nullptr || args.out == nullptr || args.block_table == nullptr ||
      (args.meter && args.cert == nullptr) || args.start_pos < 0) {
    return CudaStatus::Error("MeteredPrefillCuda: null pointer or negative start_pos");
  }
  const int64_t tokens = args.start_pos + args.num_rows;
  if ((tokens + layout.block_size - 1) / layout.block_size > args.max_blocks) {
    return CudaStatus::Error("MeteredPrefillCuda: the block table does not cover the chunk");
  }
  if (reinterpret_cast<uintptr_t>(args.out) % 8 != 0 || args.out_stride % 2 != 0) {
    return CudaStatus::Error("MeteredPrefillCuda: out rows must be 8-byte aligned");
  }
  if (reinterpret_cast<uintptr_t>(args.q) % 8 != 0 || args.q_stride % 2 != 0) {
    return CudaStatus::Error("MeteredPrefillCuda: q rows must be 8-byte aligned");
  }
  const bool group_keys = layout.scheme == KvScheme::kKivi2;
  if (group_keys != (args.exact_slot != nullptr) || (group_keys && args.exact_kv == nullptr) ||
      (group_keys && (args.layer < 0 || args.layer >= args.num_layers))) {
    return CudaStatus::Error("MeteredPrefillCuda: kivi2 needs the exact-block table (exact_slot, exact_kv, "
                             "layer < num_layers); other schemes take none");
  }
  if (group_keys && (reinterpret_cast<uintptr_t>(args.q) % 16 != 0 || args.q_stride % 4 != 0 ||
                     reinterpret_cast<uintptr_t>(args.exact_kv) % 16 != 0)) {
    return CudaStatus::Error("MeteredPrefillCuda: kivi2 reads q and exact rows as float4: 16-byte aligned rows");
  }
  prefill::Params p;
  p.layout = layout;
  p.kv = kv;
  p.a = args;
  p.group = args.num_q_heads / layout.num_kv_heads;
  p.bs_shift = 0;
  while ((1 << p.bs_shift) < layout.block_size) ++p.bs_shift;
  const int64_t ctas = (args.num_rows * p.group + prefill::kVecs - 1) / prefill::kVecs;
  if (ctas > 0x7fffffff || layout.num_kv_heads > 65535) {
    return CudaStatus::Error("MeteredPrefillCuda: chunk too large");
  }
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(layout.num_kv_heads));
  switch (layout.scheme) {
    case KvScheme::kInt8Rtn:
    case KvScheme::kInt8Dither: return prefill::LaunchInt8(p, grid, stream);
    case KvScheme::kKivi2: return prefill::LaunchKivi2(p, grid, stream);
    case KvScheme::kInt4Rtn: return prefill::LaunchInt4(p, grid, stream);
    default: return prefill::LaunchFloat(p, grid, stream);
  }
}

}  // namespace witcert
