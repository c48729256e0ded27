// Write path of the paged GPU KV pool: quantize-on-write + witnesses in one kernel.
//
// One warp per (token, KV head, K|V) vector; lane l owns channels l, l+32, ... Every
// rounding follows the CPU codec exactly (IEEE division, rintf = nearbyint under the default
// rounding mode, explicit _rn intrinsics where nvcc could otherwise contract a multiply-add).
// The witnesses (kernels/meter/witness_format.h) come from sums of squares in double in the
// order witness.cc forms them: a key's band sums one band per lane in the band's channel order
// (meter::BandSquareSum), whose norms give U (their warp max) and each lane its band's code;
// a value's ρ² and ‖x̂‖² straight from the lanes' registers, summed over each lane's channels
// and then by a butterfly (meter::ValueSummaryOf's order). So codes, scales and witnesses are
// bit-identical to the CPU's.
#include "kernels/cuda/paged_kv_cuda.h"

#include <cstdio>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/meter/bands.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/float_formats.h"
#include "kernels/meter/partial_sum.h"
#include "kernels/meter/witness_format.h"

namespace witcert {
namespace {

constexpr int kMaxDim = 256;
constexpr int kWarpsPerBlock = 4;

__device__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ int32_t RoundClamp(float y, int32_t lim) {
  float r = rintf(y);
  if (!(r >= static_cast<float>(-lim))) r = static_cast<float>(-lim);
  if (r > static_cast<float>(lim)) r = static_cast<float>(lim);
  return static_cast<int32_t>(r);
}

__device__ float ScaleRange(KvScheme s) {
  switch (s) {
    case KvScheme::kFp8Scaled: return 448.0f;
    case KvScheme::kInt8Rtn: return 127.0f;
    case KvScheme::kInt8Dither: return 126.0f;
    case KvScheme::kInt4Rtn: return 7.0f;
    default: return 1.0f;
  }
}

// kivi2 parameters of values in [lo, hi] (engine/kv/codec_kivi.cc's MakeParams): zero =
// fp16(lo) nearest and saturating, scale = fp16↑((hi − zero)/3) capped at the largest fp16.
struct Kivi2Params {
  uint16_t zero_bits, scale_bits;
  float zero, scale;
};
__device__ Kivi2Params MakeKivi2Params(float lo, float hi) {
  constexpr float kMaxHalf = 65504.0f;
  Kivi2Params p;
  p.zero_bits = meter::FloatToHalfSat(isnan(lo) ? 0.0f : lo);
  p.zero = meter::HalfToFloat(p.zero_bits);
  const float range = __fsub_rn(hi, p.zero);
  if (!(range > 0.0f)) {
    p.scale_bits = 0;
  } else {
    const float step = range / 3.0f;
    p.scale_bits = step < kMaxHalf ? meter::FloatToHalfUp(step) : meter::FloatToHalfSat(kMaxHalf);
  }
  p.scale = meter::HalfToFloat(p.scale_bits);
  return p;
}
// Code m = clamp(round((x − zero)/scale), 0, 3) and x̂ = zero + scale·m (s·m is exact).
__device__ int32_t Kivi2Code(float x, const Kivi2Params& p) {
  if (!(p.scale > 0.0f)) return 0;
  float r = rintf(__fsub_rn(x, p.zero) / p.scale);
  if (!(r >= 0.0f)) r = 0.0f;
  if (r > 3.0f) r = 3.0f;
  return static_cast<int32_t>(r);
}
__device__ float Kivi2Value(const Kivi2Params& p, int32_t m) {
  return __fadd_rn(p.zero, __fmul_rn(p.scale, static_cast<float>(m)));
}
// Packs the 2-bit codes of channels c..c+3 (lanes l..l+3 of one warp, l % 4 == 0, which gets
// the byte: channel c at bits 2·(c % 4)). Every lane of the warp must call it.
__device__ uint32_t PackKivi2Byte(int32_t m) {
  const uint32_t b = static_cast<uint32_t>(m) & 3u;
  const uint32_t b1 = __shfl_down_sync(0xffffffffu, b, 1);
  const uint32_t b2 = __shfl_down_sync(0xffffffffu, b, 2);
  const uint32_t b3 = __shfl_down_sync(0xffffffffu, b, 3);
  return b | (b1 << 2) | (b2 << 4) | (b3 << 6);
}

__device__ double WarpMaxDouble(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The key band witness of one vector from its residuals x − x̂ [d] (shared memory, double),
// one warp, band b on lane b % 32: codes [B] and the unit (lane 0 writes it), as
// meter::EncodeBandWitness does over all bands at once.
__device__ void WriteKeyWitness(const double* resid, const PagedKvLayout& L, int lane, uint8_t* codes,
                                uint16_t* unit) {
  double w[2] = {0.0, 0.0};  // bands lane, lane + 32 (B ≤ 64)
  double wmax = 0.0;
  bool finite = true;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int b = lane + 32 * i;
    if (b >= L.num_bands) break;
    w[i] = meter::InflatedNorm(meter::BandSquareSum(resid, L.head_dim, L.num_bands, L.interleaved, b));
    if (!(w[i] <= 1.7976931348623157e308)) finite = false;
    else wmax = fmax(wmax, w[i]);  // the maximum is exact in any order
  }
  wmax = WarpMaxDouble(wmax);
  finite = __all_sync(0xffffffffu, finite);
  const uint16_t u = meter::BandWitnessUnit(wmax, finite);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int b = lane + 32 * i;
    if (b < L.num_bands) codes[b] = meter::BandWitnessCode(w[i], u);
  }
  if (lane == 0) *unit = u;
}

struct WriteParams {
  PagedKvLayout layout;
  PagedKvLayer dst;
  KvWriteArgs args;
  int32_t code_bytes;
  int32_t num_outliers;  // layout.outliers()
  int32_t nscale[2];  // scale words per vector: [K, V]
  bool group_keys;
  bool has_witness;
};

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    WriteKvKernel(const WriteParams p) {
  __shared__ double resid[kWarpsPerBlock][kMaxDim];  // [warps, d] x − x̂ per channel (keys)
  // The kernel after this one may launch now: at batch 1 the q rows of the QKV projection, which
  // compute while this write runs (RopeSplitRows::kQueries), or else the decode, which streams
  // the blocks this write does not touch (MeteredDecodeCudaArgs::overlap_previous).
  cuda_launch::AllowNextKernelToStart();
  cuda_launch::WaitForPreviousKernel();  // launched to overlap the tail of the kernel writing k, v
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  const PagedKvLayout& L = p.layout;
  const int32_t hkv = L.num_kv_heads, d = L.head_dim;
  if (item >= p.args.num_tokens * hkv * 2) return;  // whole warp exits together
  const bool is_value = (item & 1) != 0;
  if (p.group_keys && !is_value) return;  // keys wait for their block (EncodeKeyGroupsCuda)
  const int32_t head = static_cast<int32_t>((item >> 1) % hkv);
  const int64_t tok = (item >> 1) / hkv;
  const int64_t slot = p.args.slots[tok];
  const int64_t pos = p.args.positions[tok];
  const int64_t block = slot / L.block_size, offset = slot % L.block_size;
  const int64_t vec = (block * hkv + head) * L.block_size + offset;  // vector index in the pool
  const float* src = (is_value ? p.args.v : p.args.k) + (tok * hkv + head) * d;
  uint8_t* codes = (is_value ? p.dst.v_codes : p.dst.k_codes) + vec * p.code_bytes;
  uint16_t* scales = is_value ? p.dst.v_scales : p.dst.k_scales;
  const KvScheme scheme = L.scheme;
  const int per_lane = d / 32;
  const int32_t nscale = p.nscale[is_value ? 1 : 0];

  // x: what the codec encodes (outlier channels filled, OutlierChannels::Fill); xo: the input.
  const int32_t m_out = p.num_outliers;
  const int32_t* fill = m_out > 0 ? p.args.outliers.fill_src + (head * 2 + (is_value ? 1 : 0)) * d : nullptr;
  float x[kMaxDim / 32], xo[kMaxDim / 32];
#pragma unroll
  for (int j = 0; j < kMaxDim / 32; ++j) {
    xo[j] = j < per_lane ? src[lane + 32 * j] : 0.0f;
    x[j] = xo[j];
    if (fill != nullptr && j < per_lane) {
      const int32_t f = fill[lane + 32 * j];
      if (f != lane + 32 * j) x[j] = f < 0 ? 0.0f : src[f];
    }
  }
  if (fill != nullptr) {  // the exact values of the outlier channels, in their table's order
    const int32_t* ch = p.args.outliers.channels + (head * 2 + (is_value ? 1 : 0)) * m_out;
    float* ov = (is_value ? p.dst.v_outliers : p.dst.k_outliers) + vec * m_out;
    for (int j = lane; j < m_out; j += 32) ov[j] = src[ch[j]];
  }

  // Scales: per vector, or per group of 32 channels (= one register j across the warp); kivi2
  // values: the vector's (zero, scale).
  float s_reg[kMaxDim / 32];
  const float range = ScaleRange(scheme);
  Kivi2Params kp{};
  if (scheme == KvScheme::kKivi2) {
    float lo = INFINITY, hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < kMaxDim / 32; ++j) {
      if (j < per_lane) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    kp = MakeKivi2Params(lo, hi);
    if (lane == 0) {
      scales[vec * 2] = kp.zero_bits;
      scales[vec * 2 + 1] = kp.scale_bits;
    }
  } else if (nscale == 1) {
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxDim / 32; ++j) if (j < per_lane) m = fmaxf(m, fabsf(x[j]));
    m = WarpMax(m);
    uint16_t b = meter::FloatToBf16Up(m / range);
    if (lane == 0) scales[vec] = b;
#pragma unroll
    for (int j = 0; j < kMaxDim / 32; ++j) s_reg[j] = meter::Bf16ToFloat(b);
  } else if (nscale > 1) {
#pragma unroll
    for (int j = 0; j < kMaxDim / 32; ++j) {
      if (j >= per_lane) { s_reg[j] = 0.0f; continue; }
      float m = WarpMax(fabsf(x[j]));
      uint16_t b = meter::FloatToBf16Up(m / range);
      if (lane == 0) scales[vec * nscale + j] = b;
      s_reg[j] = meter::Bf16ToFloat(b);
    }
  }

  const uint64_t th = scheme == KvScheme::kInt8Dither
                          ? meter::DitherTokenHash(p.args.dither_seed, static_cast<uint32_t>(p.args.layer),
                                                   static_cast<uint32_t>(head), static_cast<uint64_t>(pos))
                          : 0;
  double rsq = 0.0, vsq = 0.0;  // values: Σ (x − x̂)², Σ x̂² over the lane's channels, in order
#pragma unroll
  for (int j = 0; j < kMaxDim / 32; ++j) {
    if (j >= per_lane) break;
    const int c = lane + 32 * j;
    const float xc = x[j], s = s_reg[j];
    float xhat = xc;
    switch (scheme) {
      case KvScheme::kFp32:
        reinterpret_cast<float*>(codes)[c] = xc;
        break;
      case KvScheme::kFp16: {
        uint16_t h = meter::FloatToHalfSat(xc);
        reinterpret_cast<uint16_t*>(codes)[c] = h;
        xhat = meter::HalfToFloat(h);
        break;
      }
      case KvScheme::kBf16: {
        uint16_t h = meter::FloatToBf16(xc);
        reinterpret_cast<uint16_t*>(codes)[c] = h;
        xhat = meter::Bf16ToFloat(h);
        break;
      }
      case KvScheme::kFp8Raw: {
        uint8_t b = meter::FloatToFp8E4M3Sat(xc);
        codes[c] = b;
        xhat = meter::Fp8E4M3ToFloat(b);
        break;
      }
      case KvScheme::kFp8Scaled: {
        float inv = s > 0.0f ? 1.0f / s : 0.0f;
        uint8_t b = meter::FloatToFp8E4M3Sat(__fmul_rn(xc, inv));
        codes[c] = b;
        xhat = __fmul_rn(meter::Fp8E4M3ToFloat(b), s);
        break;
      }
      case KvScheme::kInt8Rtn: {
        int32_t m = s > 0.0f ? RoundClamp(xc / s, 127) : 0;
        codes[c] = static_cast<uint8_t>(static_cast<int8_t>(m));
        xhat = __fmul_rn(static_cast<float>(m), s);
        break;
      }
      case KvScheme::kInt8Dither: {
        float xi = meter::DitherFromTokenHash(th, static_cast<uint32_t>(c), is_value);
        int32_t m = s > 0.0f ? RoundClamp(__fadd_rn(xc / s, xi), 127) : 0;
        codes[c] = static_cast<uint8_t>(static_cast<int8_t>(m));
        xhat = s > 0.0f ? __fmul_rn(s, __fsub_rn(static_cast<float>(m), xi)) : 0.0f;
        break;
      }
      case KvScheme::kInt4Rtn: {
        int32_t m = s > 0.0f ? RoundClamp(xc / s, 7) : 0;
        uint32_t nib = static_cast<uint32_t>(m + 8) & 0xfu;
        uint32_t hi = __shfl_down_sync(0xffffffffu, nib, 1);  // channel c+1 (same j)
        if ((lane & 1) == 0) codes[c / 2] = static_cast<uint8_t>(nib | (hi << 4));
        xhat = __fmul_rn(static_cast<float>(m), s);
        break;
      }
      case KvScheme::kKivi2: {  // values (keys return above); c = lane + 32j: byte c/4
        const int32_t m = Kivi2Code(xc, kp);
        const uint32_t byte = PackKivi2Byte(m);
        if ((lane & 3) == 0) codes[c / 4] = static_cast<uint8_t>(byte);
        xhat = Kivi2Value(kp, m);
        break;
      }
      default:
        break;
    }
    if (fill != nullptr && fill[c] != c) xhat = xo[j];  // outlier: exact beside the codes
    const double r = __dsub_rn(static_cast<double>(xo[j]), static_cast<double>(xhat));  // exact
    if (is_value) {
      rsq = __fma_rn(r, r, rsq);
      vsq = __fma_rn(static_cast<double>(xhat), static_cast<double>(xhat), vsq);
    } else {
      resid[warp][c] = r;
    }
  }
  if (!p.has_witness) return;
  if (!is_value) {
    __syncwarp();
    WriteKeyWitness(resid[warp], L, lane, p.dst.k_witness + vec * L.num_bands, p.dst.k_witness_unit + vec);
    return;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    rsq = __dadd_rn(rsq, __shfl_xor_sync(0xffffffffu, rsq, o));
    vsq = __dadd_rn(vsq, __shfl_xor_sync(0xffffffffu, vsq, o));
  }
  if (lane == 0) {
    uint16_t summary[2];
    meter::EncodeValueSummary(rsq, vsq, summary);
    p.dst.v_summary[vec * 2] = summary[0];
    p.dst.v_summary[vec * 2 + 1] = summary[1];
  }
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
  const float* row0 = a.k + (static_cast<int64_t>(grp) * bs * hkv + head) * d;  // token i: + i·hkv·d
  // Channel c's encoded value: itself, or (an outlier channel) its fill source's, or 0.
  const int32_t f = m_out > 0 ? a.outliers.fill_src[head * 2 * d + c] : c;
  const bool outlier = f != c;
  auto filled = [&](int32_t i) {
    const float* r = row0 + static_cast<int64_t>(i) * hkv * d;
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
  dst.k_group[unit * 2 * d + 2 * c] = kp.zero_bits;
  dst.k_group[unit * 2 * d + 2 * c + 1] = kp.scale_bits;
  for (int32_t i = 0; i < bs; ++i) {
    const int64_t vec = unit * bs + i;
    const float* r = row0 + static_cast<int64_t>(i) * hkv * d;
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
}

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

CudaStatus WriteKvCuda(const PagedKvLayout& layout, const PagedKvLayer& dst,
                       const KvWriteArgs& args, cudaStream_t stream) {
  WITCERT_CUDA_RETURN_IF_ERROR(ValidateLayout(layout));
  if (args.num_tokens <= 0) return CudaStatus::Ok();
  if (args.k == nullptr || args.v == nullptr || args.slots == nullptr || args.positions == nullptr) {
    return CudaStatus::Error("WriteKvCuda: null input");
  }
  WriteParams p;
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
  const int64_t warps = args.num_tokens * layout.num_kv_heads * 2;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return CudaStatus::Error("WriteKvCuda: too many tokens in one call");
  return cuda_launch::Launch(WriteKvKernel, dim3(static_cast<unsigned>(blocks)), dim3(kWarpsPerBlock * 32), 0,
                             stream, /*overlap_previous=*/true, p);
}

CudaStatus EncodeKeyGroupsCuda(const PagedKvLayout& layout, const PagedKvLayer& dst,
                               const KeyGroupArgs& args, cudaStream_t stream) {
  WITCERT_CUDA_RETURN_IF_ERROR(ValidateLayout(layout));
  if (!layout.group_keys()) {
    return CudaStatus::Error(std::string("EncodeKeyGroupsCuda: scheme ") + SchemeInfo(layout.scheme).name +
                             " does not group keys");
  }
  if (args.num_groups <= 0) return CudaStatus::Ok();
  if (args.k == nullptr || args.blocks == nullptr || dst.k_group == nullptr) {
    return CudaStatus::Error("EncodeKeyGroupsCuda: null input");
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
