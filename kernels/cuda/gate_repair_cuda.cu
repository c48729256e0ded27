#include "kernels/cuda/gate_repair_cuda.h"

#include <string>

#include "kernels/cuda/decode_common.cuh"

namespace witcert {
namespace {

constexpr int kThreads = 256;

// Row r, head g of k/v [n, Hkv·d] → the unit base `dst` (K at 0, V at bs·d), offset off.
__device__ __forceinline__ void CopyRowPair(const float* k, const float* v, int64_t r, int g,
                                            int hkv, int d, int bs, int off, float* dst) {
  const float4* ks = reinterpret_cast<const float4*>(k + (r * hkv + g) * d);
  const float4* vs = reinterpret_cast<const float4*>(v + (r * hkv + g) * d);
  float4* kd = reinterpret_cast<float4*>(dst + static_cast<int64_t>(off) * d);
  float4* vd = reinterpret_cast<float4*>(dst + (static_cast<int64_t>(bs) + off) * d);
  for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
    kd[i] = ks[i];
    vd[i] = vs[i];
  }
}

// Grid (n, Hkv).
__global__ void WriteThroughKernel(const ExactUnitShape s, const float* __restrict__ k,
                                   const float* __restrict__ v, const int64_t* __restrict__ slots,
                                   const int32_t* __restrict__ entry, int32_t layer,
                                   float* host_store) {
  const int64_t r = blockIdx.x;
  const int g = blockIdx.y;
  const int32_t e = entry[r];
  if (e < 0) return;
  const int off = static_cast<int>(slots[r] % s.block_size);
  const int64_t unit = (static_cast<int64_t>(e) * s.num_layers + layer) * s.num_kv_heads + g;
  CopyRowPair(k, v, r, g, s.num_kv_heads, s.head_dim, s.block_size, off,
              host_store + unit * s.unit_floats());
}

__global__ void UpdateCachedRowsKernel(const ExactUnitShape s, const float* __restrict__ k,
                                       const float* __restrict__ v,
                                       const int64_t* __restrict__ slots, int32_t layer,
                                       const int32_t* __restrict__ exact_slot, float* exact_kv) {
  const int64_t r = blockIdx.x;
  const int g = blockIdx.y;
  const int64_t block = slots[r] / s.block_size;
  const int32_t slot = exact_slot[(block * s.num_layers + layer) * s.num_kv_heads + g];
  if (slot < 0) return;
  const int off = static_cast<int>(slots[r] % s.block_size);
  CopyRowPair(k, v, r, g, s.num_kv_heads, s.head_dim, s.block_size, off,
              exact_kv + static_cast<int64_t>(slot) * s.unit_floats());
}

// One CTA per (group, KV head): the unit's rows, then (after the CTA's reads) its entry.
__global__ void TakeStagedKernel(const ExactUnitShape s, const int32_t* __restrict__ blocks,
                                 const int32_t* __restrict__ first_pos, int32_t layer, int32_t* exact_slot,
                                 const float* __restrict__ exact_kv, float* k, float* v, int64_t* slots,
                                 int64_t* positions) {
  const int64_t g = blockIdx.x;
  const int h = blockIdx.y;
  const int32_t bs = s.block_size, d = s.head_dim, hkv = s.num_kv_heads;
  const int32_t block = blocks[g];
  const int64_t entry = (int64_t{block} * s.num_layers + layer) * hkv + h;
  const int32_t slot = block >= 0 ? exact_slot[entry] : -1;
  if (h == 0) {
    for (int t = threadIdx.x; t < bs; t += blockDim.x) {
      slots[g * bs + t] = slot >= 0 ? int64_t{block} * bs + t : -1;
      positions[g * bs + t] = slot >= 0 ? int64_t{first_pos[g]} + t : 0;
    }
  }
  if (slot < 0) return;
  const float* unit = exact_kv + static_cast<int64_t>(slot) * s.unit_floats();  // [2, bs, d]
  for (int i = threadIdx.x; i < bs * d; i += blockDim.x) {
    const int t = i / d, c = i % d;
    const int64_t row = ((g * bs + t) * hkv + h) * d + c;
    k[row] = unit[i];
    v[row] = unit[bs * d + i];
  }
  __syncthreads();
  if (threadIdx.x == 0) exact_slot[entry] = -1;
}

// One CTA per op: the unit's floats, then (after the CTA's copies) the table entry.
__global__ void PageInKernel(const ExactUnitShape s, const float* host_store,
                             const PageInOp* __restrict__ ops, float* exact_kv,
                             int32_t* exact_slot) {
  const PageInOp op = ops[blockIdx.x];
  const int64_t n4 = s.unit_floats() / 4;
  const float4* src = reinterpret_cast<const float4*>(host_store + op.src_unit * s.unit_floats());
  float4* dst = reinterpret_cast<float4*>(exact_kv + static_cast<int64_t>(op.dst_slot) * s.unit_floats());
  for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) dst[i] = src[i];
  if (threadIdx.x == 0) exact_slot[op.table_index] = op.dst_slot;
}

__global__ void TableUpdateKernel(const TableUpdate* __restrict__ u, int32_t n, int32_t* table) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) table[u[i].index] = u[i].value;
}

__global__ void FlagKernel(const meter::CertBound* __restrict__ cert,
                           const float* __restrict__ out_norm, const float* __restrict__ tv_thr,
                           const float* __restrict__ v_thr, int64_t cells, int32_t hq,
                           int32_t* flagged, int32_t* count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= cells) return;
  const int64_t r = i / hq;
  const float t = tv_thr[r];
  if (isnan(t)) return;
  const meter::CertBound c = cert[i];
  if (!meter::CellCertified(c.tv, meter::RelativeValueBound(c.v_bound, out_norm[i]), t, v_thr[r])) {
    flagged[atomicAdd(count, 1)] = static_cast<int32_t>(i);
  }
}

template <bool SCATTER>
__global__ void MoveRowsKernel(const uint32_t* __restrict__ src, int64_t row_words,
                               const int32_t* __restrict__ index, uint32_t* __restrict__ dst) {
  const int64_t i = blockIdx.x;
  const int64_t from = SCATTER ? i : index[i], to = SCATTER ? index[i] : i;
  for (int64_t w = threadIdx.x; w < row_words; w += blockDim.x) {
    dst[to * row_words + w] = src[from * row_words + w];
  }
}

// ---- block risk -------------------------------------------------------------------------

// ℓ̃_t of token t for the query in shared memory (code-domain dot per 8-channel chunk, times
// its scale, like the decode kernels).
// Outlier-bypass layouts rank on their codes alone (the exact outlier channels are not put
// back); the ranking only orders page-ins, it never enters a bound.
template <class C, int D>
__device__ float StoredLogit(const PagedKvLayout& L, const PagedKvLayer& kv, const float* q,
                             const int32_t* bt, int bs_shift, int kvh, int64_t t, uint64_t h1,
                             float inv_sqrt_d, int32_t cb, int32_t nscale) {
  const int64_t blk = bt[static_cast<int32_t>(t) >> bs_shift];
  const int64_t vec = ((blk * L.num_kv_heads + kvh) << bs_shift) + (static_cast<int32_t>(t) & (L.block_size - 1));
  float dot = 0.0f;
#pragma unroll 4
  for (int c = 0; c < D / 8; ++c) {
    uint32_t raw[cuda_kv::kChunkWords<C::kBytes>];
    cuda_kv::LoadChunk<C::kBytes>(kv.k_codes + vec * cb + c * C::kBytes, raw);
    const float sc = C::kScaled ? cuda_kv::Bf16Bits(kv.k_scales[vec * nscale + (nscale > 1 ? c * 8 / 32 : 0)]) : 1.0f;
    cuda_kv::DecodeCtx ctx{C::kTierB ? meter::DitherTokenHashAt(h1, static_cast<uint64_t>(t)) : 0ull, c * 8, false};
    ctx.params = cuda_kv::KeyParams<C, D>(kv, blk * L.num_kv_heads + kvh, c * 8);
    float x[8];
    C::Decode8(raw, ctx, x);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) s = fmaf(q[c * 8 + i], x[i], s);
    dot = fmaf(s, sc, dot);
  }
  return dot * inv_sqrt_d;
}

template <class C, int D>
__global__ void __launch_bounds__(kThreads) BlockRiskKernel(const PagedKvLayout L, const PagedKvLayer kv,
                                                            const BlockRiskArgs a, int bs_shift,
                                                            int32_t cb, int32_t nscale, bool has_w) {
  __shared__ __align__(16) float q[D];  // QueryBandNorm reads it by float4
  __shared__ float qbn[64];
  __shared__ float red[kThreads / 32];
  __shared__ float s_m;
  const int tid = threadIdx.x;
  const int32_t code = a.cells[blockIdx.x];
  const int32_t row = code / a.num_q_heads, h = code % a.num_q_heads;
  const int32_t group = a.num_q_heads / L.num_kv_heads, kvh = h / group, nb = L.num_bands;
  const float* qg = a.q + static_cast<int64_t>(code) * D;
  for (int i = tid; i < D; i += kThreads) q[i] = qg[i];
  __syncthreads();
  if (tid < nb) {
    double unused = 0.0;
    qbn[tid] = cuda_kv::QueryBandNorm<D>(q, tid, nb, L.interleaved, &unused);
  }
  __syncthreads();
  const int64_t S = a.context_lens[row];
  const int32_t* bt = a.block_tables + static_cast<int64_t>(row) * a.max_blocks;
  const int64_t nblocks = (S + L.block_size - 1) / L.block_size;
  float* risk = a.risk + static_cast<int64_t>(blockIdx.x) * a.max_blocks;
  const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(D));
  const uint64_t h1 = meter::DitherHeadHash(a.dither_seed, static_cast<uint32_t>(a.layer), static_cast<uint32_t>(kvh));
  const float infl = meter::EpsInflation(D, nb);
  // One pass over the keys: a thread takes whole logical blocks and keeps each block's risk
  // relative to the block's own max logit, stored as a log, ln(r_j) + m_j; the block-wide
  // maximum M of those then scales every block to e^{ln r_j + m_j − M} (ranking only needs a
  // common factor). Exact blocks and schemes without a witness score 0.
  float lmax = -INFINITY;
  for (int64_t j = tid; j < nblocks; j += kThreads) {
    const int64_t blk = bt[j];
    float lr = -INFINITY;
    const bool exact = a.exact_slot != nullptr &&
                       a.exact_slot[(blk * a.num_layers + a.layer) * L.num_kv_heads + kvh] >= 0;
    if (has_w && !exact) {
      float mb = -INFINITY, rb = 0.0f;
      const int64_t t1 = (j + 1) * L.block_size < S ? (j + 1) * L.block_size : S;
      for (int64_t t = j * L.block_size; t < t1; ++t) {
        const int64_t vec = ((blk * L.num_kv_heads + kvh) << bs_shift) + (static_cast<int32_t>(t) & (L.block_size - 1));
        const float eps = nb == 8 ? cuda_kv::TokenEpsilon<8>(kv.k_witness + vec * 8, kv.k_witness_unit + vec, 8, qbn,
                                                             inv_sqrt_d, infl, true, 0.0f, 0.0f)
                                  : cuda_kv::TokenEpsilon<0>(kv.k_witness + vec * nb, kv.k_witness_unit + vec, nb, qbn,
                                                             inv_sqrt_d, infl, true, 0.0f, 0.0f);
        if (!(eps > 0.0f)) continue;
        const float l = StoredLogit<C, D>(L, kv, q, bt, bs_shift, kvh, t, h1, inv_sqrt_d, cb, nscale);
        if (l > mb) {
          rb = mb > -INFINITY ? rb * expf(mb - l) : 0.0f;
          mb = l;
        }
        rb += expf(l - mb) * expm1f(fminf(eps, 80.0f));
      }
      if (rb > 0.0f) lr = logf(rb) + mb;
    }
    risk[j] = lr;  // this thread rescales it below
    lmax = fmaxf(lmax, lr);
  }
  for (int o = 16; o > 0; o >>= 1) lmax = fmaxf(lmax, __shfl_xor_sync(0xffffffffu, lmax, o));
  if ((tid & 31) == 0) red[tid >> 5] = lmax;
  __syncthreads();
  if (tid == 0) {
    float mm = -INFINITY;
    for (int w = 0; w < kThreads / 32; ++w) mm = fmaxf(mm, red[w]);
    s_m = mm;
  }
  __syncthreads();
  for (int64_t j = tid; j < nblocks; j += kThreads) {
    risk[j] = risk[j] > -INFINITY ? expf(risk[j] - s_m) : 0.0f;
  }
}

template <class C>
CudaStatus LaunchRisk(const PagedKvLayout& L, const PagedKvLayer& kv, const BlockRiskArgs& a,
                      int bs_shift, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.num_cells));
  const int32_t cb = L.code_bytes(), ns = L.scales_per_vector(false);  // keys
  const bool hw = L.has_witness();
  if (L.head_dim == 64) {
    BlockRiskKernel<C, 64><<<grid, kThreads, 0, stream>>>(L, kv, a, bs_shift, cb, ns, hw);
  } else if (L.head_dim == 128) {
    BlockRiskKernel<C, 128><<<grid, kThreads, 0, stream>>>(L, kv, a, bs_shift, cb, ns, hw);
  } else {
    return CudaStatus::Error("BlockRiskCuda: head_dim must be 64 or 128");
  }
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

}  // namespace

CudaStatus WriteThroughExactCuda(const ExactUnitShape& shape, const float* k, const float* v,
                                 const int64_t* slots, const int32_t* entry, int64_t n,
                                 int32_t layer, float* host_store, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (shape.head_dim % 4 != 0) return CudaStatus::Error("WriteThroughExactCuda: head_dim % 4 != 0");
  WriteThroughKernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(shape.num_kv_heads)), 64, 0, stream>>>(
      shape, k, v, slots, entry, layer, host_store);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

CudaStatus UpdateCachedExactRowsCuda(const ExactUnitShape& shape, const float* k, const float* v,
                                     const int64_t* slots, int64_t n, int32_t layer,
                                     const int32_t* exact_slot, float* exact_kv,
                                     cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  UpdateCachedRowsKernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(shape.num_kv_heads)), 64, 0, stream>>>(
      shape, k, v, slots, layer, exact_slot, exact_kv);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

CudaStatus TakeStagedBlocksCuda(const ExactUnitShape& shape, const int32_t* blocks, const int32_t* first_pos,
                                int32_t num_groups, int32_t layer, int32_t* exact_slot, const float* exact_kv,
                                float* k, float* v, int64_t* slots, int64_t* positions, cudaStream_t stream) {
  if (num_groups <= 0) return CudaStatus::Ok();
  TakeStagedKernel<<<dim3(static_cast<unsigned>(num_groups), static_cast<unsigned>(shape.num_kv_heads)), kThreads,
                     0, stream>>>(shape, blocks, first_pos, layer, exact_slot, exact_kv, k, v, slots, positions);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

CudaStatus PageInExactCuda(const ExactUnitShape& shape, const float* host_store,
                           const PageInOp* ops, int32_t n, float* exact_kv, int32_t* exact_slot,
                           cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  PageInKernel<<<n, kThreads, 0, stream>>>(shape, host_store, ops, exact_kv, exact_slot);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

CudaStatus ApplyTableUpdatesCuda(const TableUpdate* updates, int32_t n, int32_t* exact_slot,
                                 cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  TableUpdateKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(updates, n, exact_slot);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

CudaStatus FlagUncertifiedCuda(const meter::CertBound* cert, const float* out_norm,
                               const float* tv_threshold, const float* v_threshold, int64_t rows,
                               int32_t num_q_heads, int32_t* flagged, int32_t* count,
                               cudaStream_t stream) {
  WITCERT_CUDA_CALL(cudaMemsetAsync(count, 0, sizeof(int32_t), stream));
  const int64_t cells = rows * num_q_heads;
  if (cells <= 0) return CudaStatus::Ok();
  FlagKernel<<<static_cast<unsigned>((cells + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      cert, out_norm, tv_threshold, v_threshold, cells, num_q_heads, flagged, count);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

namespace {
// Gather (kScatter = false): dst[i] = src[index[i]]; scatter: dst[index[i]] = src[i].
template <bool kScatter>
CudaStatus MoveRows(const char* name, const void* src, int64_t row_bytes, const int32_t* index,
                    int32_t n, void* dst, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (row_bytes % 4 != 0) return CudaStatus::Error(std::string(name) + ": row_bytes % 4 != 0");
  MoveRowsKernel<kScatter><<<n, 128, 0, stream>>>(static_cast<const uint32_t*>(src), row_bytes / 4,
                                                  index, static_cast<uint32_t*>(dst));
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}
}  // namespace

CudaStatus GatherRowsCuda(const void* src, int64_t row_bytes, const int32_t* index, int32_t n,
                          void* dst, cudaStream_t stream) {
  return MoveRows<false>("GatherRowsCuda", src, row_bytes, index, n, dst, stream);
}

CudaStatus ScatterRowsCuda(const void* src, int64_t row_bytes, const int32_t* index, int32_t n,
                           void* dst, cudaStream_t stream) {
  return MoveRows<true>("ScatterRowsCuda", src, row_bytes, index, n, dst, stream);
}

CudaStatus BlockRiskCuda(const PagedKvLayout& layout, const PagedKvLayer& kv,
                         const BlockRiskArgs& a, cudaStream_t stream) {
  if (a.num_cells <= 0) return CudaStatus::Ok();
  if (a.num_q_heads % layout.num_kv_heads != 0 || layout.num_bands > 64) {
    return CudaStatus::Error("BlockRiskCuda: bad head or band counts");
  }
  int bs_shift = 0;
  while ((1 << bs_shift) < layout.block_size) ++bs_shift;
  return cuda_kv::WithDevCodec(layout.scheme, "BlockRiskCuda: unknown scheme", [&](auto codec) {
    return LaunchRisk<typename decltype(codec)::type>(layout, kv, a, bs_shift, stream);
  });
}

}  // namespace witcert
