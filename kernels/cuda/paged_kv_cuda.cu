// Write path of the paged GPU KV pool: quantize-on-write + witnesses in one kernel (the
// per-vector device code and its rounding rules: kv_write_vector.cuh), and the group-encoded keys.
#include "kernels/cuda/paged_kv_cuda.h"

#include <array>
#include <cstdio>
#include <utility>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/kv_write_vector.cuh"
#include "kernels/cuda/ops/row_transforms.cuh"

namespace witcert {
namespace {

using namespace kv_write;  // NOLINT: the write's device helpers (kv_write_vector.cuh)

constexpr int kWarpsPerBlock = 4;

// One warp per vector (WriteKvVector), one instantiation per scheme (p.layout.scheme).
template <KvScheme kScheme>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) WriteKvKernel(const KvWritePlan p) {
  __shared__ double resid[kWarpsPerBlock][kMaxDim];  // [warps, d] x − x̂ per channel (keys)
  // The kernel after this one may launch now: at batch 1 the q rows of the QKV projection, which
  // compute while this write runs (RopeSplitRows::kQueries), or else the decode, which streams
  // the blocks this write does not touch (MeteredDecodeCudaArgs::overlap_previous).
  cuda_launch::AllowNextKernelToStart();
  cuda_launch::WaitForPreviousKernel();  // launched to overlap the tail of the kernel writing k, v
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (item >= p.args.num_tokens * p.layout.num_kv_heads * 2) return;  // whole warp exits together
  WriteKvVector<kScheme>(p, item, lane, resid[warp]);
}

// RopeSplitWriteKvCuda: CTAs [0, q_blocks) rotate the q pairs, one pair per thread (q_dim / 2
// per token); the rest take one (token, KV head, K|V) vector per warp: its k pairs rotated (or v
// copied) into the warp's shared-memory copy, which goes to k or v and to WriteKvVector. The
// arithmetic is RopeSplitQkvKernel's (cuda_ops::RotatePair), so q, k and v are its bits.
constexpr int kRopeWriteWarps = 8;
struct RopeWriteParams {
  KvWritePlan plan;
  const float* qkv;
  int64_t qkv_stride;
  int32_t num_heads;
  cuda_ops::RopeFreq freq;
  bool interleaved;
  float* q;
  float* k;
  float* v;
  int64_t q_blocks;
};
template <KvScheme kScheme>
__global__ void __launch_bounds__(kRopeWriteWarps * 32) RopeSplitWriteKvKernel(const RopeWriteParams r) {
  __shared__ float vec[kRopeWriteWarps][kMaxDim];      // [warps, d] the rotated k or v
  __shared__ double resid[kRopeWriteWarps][kMaxDim];   // [warps, d] x − x̂ (keys)
  const KvWritePlan& p = r.plan;
  const int32_t d = p.layout.head_dim, hkv = p.layout.num_kv_heads, half = d / 2;
  const int64_t n = p.args.num_tokens;
  // The decode may launch now and stream the blocks no write here touches.
  cuda_launch::AllowNextKernelToStart();
  cuda_launch::WaitForPreviousKernel();  // launched to overlap the QKV projection's tail
  if (blockIdx.x < r.q_blocks) {  // q pairs
    const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= n * r.num_heads * half) return;
    const int32_t pr = static_cast<int32_t>(e % half);
    const int64_t h = (e / half) % r.num_heads, i = e / (int64_t{half} * r.num_heads);
    cuda_ops::RotatePair(r.qkv + i * r.qkv_stride + h * d, r.q + (i * r.num_heads + h) * d, pr, d,
                         p.args.positions[i], r.freq, r.interleaved);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t item = (static_cast<int64_t>(blockIdx.x) - r.q_blocks) * kRopeWriteWarps + warp;
  if (item >= n * hkv * 2) return;  // whole warp exits together
  const bool is_value = (item & 1) != 0;
  const int32_t head = static_cast<int32_t>((item >> 1) % hkv);
  const int64_t i = (item >> 1) / hkv;
  // The vector's input: v heads follow the q and k heads in the row.
  const float* x = r.qkv + i * r.qkv_stride + (int64_t{r.num_heads} + (is_value ? hkv : 0) + head) * d;
  float* copy = vec[warp];
  if (is_value) {
    for (int c = lane; c < d; c += 32) copy[c] = x[c];
  } else {
    const int64_t pos = p.args.positions[i];
    for (int32_t pr = lane; pr < half; pr += 32) cuda_ops::RotatePair(x, copy, pr, d, pos, r.freq, r.interleaved);
  }
  __syncwarp();
  float* out = (is_value ? r.v : r.k) + (i * hkv + head) * d;
  for (int c = lane; c < d; c += 32) out[c] = copy[c];
  WriteKvVector<kScheme>(p, item, lane, resid[warp], copy);
}

// One CTA per (group, KV head), thread c = channel c (d threads): the channel's parameters
// over the block's tokens, then token by token its code and residual, the band witness
// from the residuals in shared memory (warp 0, WriteKeyWitness).
__global__ void __launch_bounds__(kMaxDim) EncodeKeyGroupsKernel(const PagedKvLayout L, const PagedKvLayer dst,
                                                                 const KeyGroupArgs a, int32_t cb, int32_t m_out) {
  __shared__ double resid[kMaxDim];  // [d] x − x̂ of the current token
  const int c = threadIdx.x, lane = c & 31;
  const int32_t grp = blockIdx.x, head = blockIdx.y;
  const int32_t d = L.head_dim, hkv = L.num_kv_heads, bs = L.block_size;
  const int64_t blk = a.blocks[grp];
  if (blk < 0) return;
  // Token i's key: row0 + i · row_stride.
  const float* row0;
  int64_t row_stride;
  int32_t* table_entry = nullptr;
  if (a.k != nullptr) {
    const int64_t first = a.first_rows != nullptr ? a.first_rows[grp] : static_cast<int64_t>(grp) * bs;
    row0 = a.k + (first * hkv + head) * d;
    row_stride = static_cast<int64_t>(hkv) * d;
  } else {
    table_entry = a.exact_slot + (blk * a.num_layers + a.layer) * hkv + head;
    const int32_t slot = *table_entry;
    if (slot < 0) return;
    row0 = a.exact_kv + static_cast<int64_t>(slot) * 2 * bs * d;  // the slot's K rows
    row_stride = d;
  }
  // Channel c's encoded value: itself, or (an outlier channel) its fill source's, or 0.
  const int32_t f = m_out > 0 ? a.outliers.fill_src[head * 2 * d + c] : c;
  const bool outlier = f != c;
  auto filled = [&](int32_t i) {
    const float* r = row0 + i * row_stride;
    return f < 0 ? 0.0f : r[f];
  };
  float lo = INFINITY, hi = -INFINITY;
  for (int32_t i = 0; i < bs; ++i) {
    const float xi = filled(i);
    lo = fminf(lo, xi);
    hi = fmaxf(hi, xi);
  }
  const Kivi2Params kp = MakeKivi2Params(lo, hi);
  const int64_t unit = blk * hkv + head;  // (block, KV head)
  dst.k_group[unit * 2 * d + KeyGroupWord(c, false)] = kp.zero_bits;
  dst.k_group[unit * 2 * d + KeyGroupWord(c, true)] = kp.scale_bits;
  for (int32_t i = 0; i < bs; ++i) {
    const int64_t vec = unit * bs + i;
    const float* r = row0 + i * row_stride;
    const int32_t m = Kivi2Code(filled(i), kp);
    const uint32_t byte = PackKivi2Byte(m);  // d is a multiple of 32: whole warps
    if ((lane & 3) == 0) dst.k_codes[vec * cb + c / 4] = static_cast<uint8_t>(byte);
    if (c < m_out) dst.k_outliers[vec * m_out + c] = r[a.outliers.channels[head * 2 * m_out + c]];
    const float xhat = outlier ? r[c] : Kivi2Value(kp, m);  // outlier: exact beside the codes
    resid[c] = __dsub_rn(static_cast<double>(r[c]), static_cast<double>(xhat));
    __syncthreads();
    if (c < 32) WriteKeyWitness(resid, L, lane, dst.k_witness + vec * L.num_bands, dst.k_witness_unit + vec);
    __syncthreads();
  }
  if (table_entry != nullptr && c == 0) *table_entry = -1;  // every thread has read the slot
}

// The instantiations of a write kernel, indexed by scheme (ValidateLayout has checked the range).
template <template <KvScheme> class Kernel, size_t... kSchemes>
constexpr auto KernelsByScheme(std::index_sequence<kSchemes...>) {
  return std::array{Kernel<static_cast<KvScheme>(kSchemes)>::kFunction...};
}
template <KvScheme kScheme>
struct WriteKernelOf {
  static constexpr auto kFunction = &WriteKvKernel<kScheme>;
};
template <KvScheme kScheme>
struct RopeWriteKernelOf {
  static constexpr auto kFunction = &RopeSplitWriteKvKernel<kScheme>;
};
constexpr auto kSchemeSequence = std::make_index_sequence<static_cast<size_t>(KvScheme::kCount)>{};
constexpr auto kWriteKernels = KernelsByScheme<WriteKernelOf>(kSchemeSequence);
constexpr auto kRopeWriteKernels = KernelsByScheme<RopeWriteKernelOf>(kSchemeSequence);

}  // namespace

CudaStatus ValidateLayout(const PagedKvLayout& L) {
  if (L.num_blocks <= 0 || L.num_kv_heads <= 0 || L.block_size <= 0) {
    return CudaStatus::Error("paged KV layout: num_blocks, num_kv_heads, block_size must be > 0");
  }
  if (L.head_dim < 32 || L.head_dim > kMaxDim || L.head_dim % 32 != 0) {
    return CudaStatus::Error("paged KV layout: head_dim must be a multiple of 32 in [32, 256], got " +
                             std::to_string(L.head_dim));
  }
  if (L.num_bands <= 0 || L.num_bands > 64 || (L.head_dim / 2) % L.num_bands != 0) {
    return CudaStatus::Error("paged KV layout: num_bands must divide head_dim/2 and be ≤ 64");
  }
  if (static_cast<int32_t>(L.scheme) < 0 || L.scheme >= KvScheme::kCount) {
    return CudaStatus::Error("paged KV layout: unknown scheme");
  }
  if (L.outlier_channels < 0 || L.outlier_channels >= L.head_dim) {
    return CudaStatus::Error("paged KV layout: outlier_channels must be in [0, head_dim)");
  }
  return CudaStatus::Ok();
}

PagedKvPoolCuda::~PagedKvPoolCuda() {
  if (layers_ == nullptr) return;
  for (int32_t l = 0; l < num_layers_; ++l) {
    PagedKvLayer& x = layers_[l];
    for (void* ptr : {static_cast<void*>(x.k_codes), static_cast<void*>(x.k_scales),
                      static_cast<void*>(x.k_witness), static_cast<void*>(x.k_witness_unit),
                      static_cast<void*>(x.v_codes), static_cast<void*>(x.v_scales),
                      static_cast<void*>(x.v_summary),
                      static_cast<void*>(x.k_group), static_cast<void*>(x.k_outliers),
                      static_cast<void*>(x.v_outliers)}) {
      if (ptr != nullptr) cudaFree(ptr);
    }
  }
  delete[] layers_;
}

CudaStatus PagedKvPoolCuda::Init(const PagedKvLayout& layout, int32_t num_layers) {
  WITCERT_CUDA_RETURN_IF_ERROR(ValidateLayout(layout));
  if (layers_ != nullptr) return CudaStatus::Error("PagedKvPoolCuda::Init called twice");
  layout_ = layout;
  num_layers_ = num_layers;
  layers_ = new PagedKvLayer[num_layers];
  const int64_t n = layout.vectors();
  auto alloc = [](void** p, int64_t bytes) -> CudaStatus {
    if (bytes == 0) return CudaStatus::Ok();
    WITCERT_CUDA_CALL(cudaMalloc(p, static_cast<size_t>(bytes)));
    WITCERT_CUDA_CALL(cudaMemset(*p, 0, static_cast<size_t>(bytes)));
    return CudaStatus::Ok();
  };
  const int64_t cb = layout.code_bytes(), ksb = 2 * layout.scales_per_vector(false),
                vsb = 2 * layout.scales_per_vector(true), kwb = layout.has_witness() ? layout.num_bands : 0,
                kub = layout.has_witness() ? 2 : 0, vsum = layout.value_summary_bytes(),
                gb = 2 * layout.group_params_per_block(), ob = 4 * layout.outliers();
  for (int32_t l = 0; l < num_layers; ++l) {
    PagedKvLayer& x = layers_[l];
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.k_codes), n * cb));
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.v_codes), n * cb));
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.k_scales), n * ksb));
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.v_scales), n * vsb));
    WITCERT_CUDA_RETURN_IF_ERROR(
        alloc(reinterpret_cast<void**>(&x.k_group), layout.num_blocks * layout.num_kv_heads * gb));
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.k_outliers), n * ob));
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.v_outliers), n * ob));
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.k_witness), n * kwb));
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.k_witness_unit), n * kub));
    WITCERT_CUDA_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x.v_summary), n * vsum));
  }
  return CudaStatus::Ok();
}

CudaStatus PlanKvWriteCuda(const PagedKvLayout& layout, const PagedKvLayer& dst, const KvWriteArgs& args,
                           KvWritePlan* plan) {
  WITCERT_CUDA_RETURN_IF_ERROR(ValidateLayout(layout));
  if (args.k == nullptr || args.v == nullptr || args.slots == nullptr || args.positions == nullptr) {
    return CudaStatus::Error("WriteKvCuda: null input");
  }
  KvWritePlan& p = *plan;
  p.layout = layout;
  p.dst = dst;
  p.args = args;
  p.code_bytes = layout.code_bytes();
  p.num_outliers = layout.outliers();
  if (p.num_outliers > 0 && (args.outliers.channels == nullptr || args.outliers.fill_src == nullptr)) {
    return CudaStatus::Error("WriteKvCuda: outlier channels on but no tables");
  }
  p.nscale[0] = layout.scales_per_vector(false);
  p.nscale[1] = layout.scales_per_vector(true);
  p.group_keys = layout.group_keys();
  p.has_witness = layout.has_witness();
  return CudaStatus::Ok();
}

CudaStatus WriteKvCuda(const PagedKvLayout& layout, const PagedKvLayer& dst,
                       const KvWriteArgs& args, cudaStream_t stream) {
  if (args.num_tokens <= 0) return CudaStatus::Ok();
  KvWritePlan p;
  WITCERT_CUDA_RETURN_IF_ERROR(PlanKvWriteCuda(layout, dst, args, &p));
  const int64_t warps = args.num_tokens * layout.num_kv_heads * 2;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return CudaStatus::Error("WriteKvCuda: too many tokens in one call");
  return cuda_launch::Launch(kWriteKernels[static_cast<size_t>(layout.scheme)], dim3(static_cast<unsigned>(blocks)),
                             dim3(kWarpsPerBlock * 32), 0, stream, /*overlap_previous=*/true, p);
}

CudaStatus RopeSplitWriteKvCuda(const float* qkv, int64_t qkv_stride, int32_t num_heads, cuda_ops::RopeFreq freq,
                                bool interleaved, float* q, float* k, float* v, const KvWritePlan& plan,
                                cudaStream_t stream) {
  const int64_t n = plan.args.num_tokens;
  if (n <= 0) return CudaStatus::Ok();
  const int32_t hkv = plan.layout.num_kv_heads, d = plan.layout.head_dim;
  if (qkv == nullptr || q == nullptr || k == nullptr || v == nullptr || num_heads <= 0 ||
      plan.args.k != k || plan.args.v != v || d % 2 != 0 || d > kMaxDim) {
    return CudaStatus::Error("RopeSplitWriteKvCuda: needs qkv, q, and the plan's k and v rows as k and v");
  }
  if (qkv_stride < int64_t{num_heads + 2 * hkv} * d) {
    return CudaStatus::Error("RopeSplitWriteKvCuda: qkv_stride shorter than the q, k and v heads");
  }
  RopeWriteParams r{plan, qkv, qkv_stride, num_heads, freq, interleaved, q, k, v, 0};
  constexpr int64_t kThreads = kRopeWriteWarps * 32;
  r.q_blocks = (n * num_heads * (d / 2) + kThreads - 1) / kThreads;
  const int64_t blocks = r.q_blocks + (n * hkv * 2 + kRopeWriteWarps - 1) / kRopeWriteWarps;
  if (blocks > 0x7fffffff) return CudaStatus::Error("RopeSplitWriteKvCuda: too many tokens in one call");
  return cuda_launch::Launch(kRopeWriteKernels[static_cast<size_t>(plan.layout.scheme)],
                             dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, /*overlap_previous=*/true, r);
}

CudaStatus EncodeKeyGroupsCuda(const PagedKvLayout& layout, const PagedKvLayer& dst,
                               const KeyGroupArgs& args, cudaStream_t stream) {
  WITCERT_CUDA_RETURN_IF_ERROR(ValidateLayout(layout));
  if (!layout.group_keys()) {
    return CudaStatus::Error(std::string("EncodeKeyGroupsCuda: scheme ") + SchemeInfo(layout.scheme).name +
                             " does not group keys");
  }
  if (args.num_groups <= 0) return CudaStatus::Ok();
  if ((args.k == nullptr && (args.exact_slot == nullptr || args.exact_kv == nullptr)) ||
      args.blocks == nullptr || dst.k_group == nullptr) {
    return CudaStatus::Error("EncodeKeyGroupsCuda: null input");
  }
  if (args.k == nullptr && (args.layer < 0 || args.layer >= args.num_layers)) {
    return CudaStatus::Error("EncodeKeyGroupsCuda: exact-table source needs 0 <= layer < num_layers");
  }
  const dim3 grid(static_cast<unsigned>(args.num_groups), static_cast<unsigned>(layout.num_kv_heads));
  const int32_t m_out = layout.outliers();
  if (m_out > 0 && (args.outliers.channels == nullptr || args.outliers.fill_src == nullptr)) {
    return CudaStatus::Error("EncodeKeyGroupsCuda: outlier channels on but no tables");
  }
  EncodeKeyGroupsKernel<<<grid, layout.head_dim, 0, stream>>>(layout, dst, args, layout.code_bytes(), m_out);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

}  // namespace witcert
