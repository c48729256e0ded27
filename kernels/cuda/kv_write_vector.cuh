// The write of one KV vector into the paged pool — quantize-on-write and its witness — as one
// warp's device code, shared by the write kernel (WriteKvCuda) and the batched step's RoPE split,
// which writes each k and v vector it has just rotated or copied (RopeSplitWriteKvCuda).
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
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/bands.h"
#include "kernels/meter/cert_math.h"
#include "kernels/meter/float_formats.h"
#include "kernels/meter/partial_sum.h"
#include "kernels/meter/witness_format.h"

namespace witcert::kv_write {

constexpr int kMaxDim = 256;

__device__ inline float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ inline int32_t RoundClamp(float y, int32_t lim) {
  float r = rintf(y);
  if (!(r >= static_cast<float>(-lim))) r = static_cast<float>(-lim);
  if (r > static_cast<float>(lim)) r = static_cast<float>(lim);
  return static_cast<int32_t>(r);
}

__host__ __device__ constexpr float ScaleRange(KvScheme s) {
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
__device__ inline Kivi2Params MakeKivi2Params(float lo, float hi) {
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
__device__ inline int32_t Kivi2Code(float x, const Kivi2Params& p) {
  if (!(p.scale > 0.0f)) return 0;
  float r = rintf(__fsub_rn(x, p.zero) / p.scale);
  if (!(r >= 0.0f)) r = 0.0f;
  if (r > 3.0f) r = 3.0f;
  return static_cast<int32_t>(r);
}
__device__ inline float Kivi2Value(const Kivi2Params& p, int32_t m) {
  return __fadd_rn(p.zero, __fmul_rn(p.scale, static_cast<float>(m)));
}
// Packs the 2-bit codes of channels c..c+3 (lanes l..l+3 of one warp, l % 4 == 0, which gets
// the byte: channel c at bits 2·(c % 4)). Every lane of the warp must call it.
__device__ inline uint32_t PackKivi2Byte(int32_t m) {
  const uint32_t b = static_cast<uint32_t>(m) & 3u;
  const uint32_t b1 = __shfl_down_sync(0xffffffffu, b, 1);
  const uint32_t b2 = __shfl_down_sync(0xffffffffu, b, 2);
  const uint32_t b3 = __shfl_down_sync(0xffffffffu, b, 3);
  return b | (b1 << 2) | (b2 << 4) | (b3 << 6);
}

__device__ inline double WarpMaxDouble(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The key band witness of one vector from its residuals x − x̂ [d] (shared memory, double),
// one warp, band b on lane b % 32: codes [B] and the unit (lane 0 writes it), as
// meter::EncodeBandWitness does over all bands at once.
__device__ inline void WriteKeyWitness(const double* resid, const PagedKvLayout& L, int lane, uint8_t* codes,
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

// Encodes vector `item` = (token · Hkv + head) · 2 + (1 for the value) of p.args into the pool:
// codes, scales, and the key band witness or the value summary. One warp, every lane; resid
// [kMaxDim] doubles of shared memory for this warp. The vector is read from p.args' rows, or,
// when `vector` is set, from there ([d], e.g. the warp's shared-memory copy of it).
// kScheme is p.layout.scheme: the kernels instantiate one function per scheme, so a launch runs
// its codec's code alone. A one-token write is a chain of latencies on the batch-1 critical path;
// with the scheme a runtime switch it advanced the traced step 8.5 µs a layer, with one
// instantiation per scheme 6.6 µs (bench/RESULTS.md, eleventh session).
template <KvScheme kScheme>
__device__ inline void WriteKvVector(const KvWritePlan& p, int64_t item, int lane, double* resid,
                                     const float* vector = nullptr) {
  const PagedKvLayout& L = p.layout;
  const int32_t hkv = L.num_kv_heads, d = L.head_dim;
  const bool is_value = (item & 1) != 0;
  if (p.group_keys && !is_value) return;  // keys wait for their block (EncodeKeyGroupsCuda)
  const int32_t head = static_cast<int32_t>((item >> 1) % hkv);
  const int64_t tok = (item >> 1) / hkv;
  const int64_t slot = p.args.slots[tok], pos = p.args.positions[tok];  // pos: the dither hash's input
  if (slot < 0) return;  // a padding row (TakeStagedBlocksCuda)
  const int64_t block = slot / L.block_size, offset = slot % L.block_size;
  const int64_t vec = (block * hkv + head) * L.block_size + offset;  // vector index in the pool
  const float* row = (is_value ? p.args.v : p.args.k) + (tok * hkv + head) * d;
  auto src = [&](int c) { return vector != nullptr ? vector[c] : row[c]; };
  uint8_t* codes = (is_value ? p.dst.v_codes : p.dst.k_codes) + vec * p.code_bytes;
  uint16_t* scales = is_value ? p.dst.v_scales : p.dst.k_scales;
  constexpr KvScheme scheme = kScheme;
  const int per_lane = d / 32;
  const int32_t nscale = p.nscale[is_value ? 1 : 0];

  // x: what the codec encodes (outlier channels filled, OutlierChannels::Fill); xo: the input.
  const int32_t m_out = p.num_outliers;
  const int32_t* fill = m_out > 0 ? p.args.outliers.fill_src + (head * 2 + (is_value ? 1 : 0)) * d : nullptr;
  float x[kMaxDim / 32], xo[kMaxDim / 32];
#pragma unroll
  for (int j = 0; j < kMaxDim / 32; ++j) {
    xo[j] = j < per_lane ? src(lane + 32 * j) : 0.0f;
    x[j] = xo[j];
    if (fill != nullptr && j < per_lane) {
      const int32_t f = fill[lane + 32 * j];
      if (f != lane + 32 * j) x[j] = f < 0 ? 0.0f : src(f);
    }
  }
  if (fill != nullptr) {  // the exact values of the outlier channels, in their table's order
    const int32_t* ch = p.args.outliers.channels + (head * 2 + (is_value ? 1 : 0)) * m_out;
    float* ov = (is_value ? p.dst.v_outliers : p.dst.k_outliers) + vec * m_out;
    for (int j = lane; j < m_out; j += 32) ov[j] = src(ch[j]);
  }

  // Scales: per vector, or per group of 32 channels (= one register j across the warp); kivi2
  // values: the vector's (zero, scale).
  float s_reg[kMaxDim / 32];
  constexpr float range = ScaleRange(scheme);
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
      resid[c] = r;
    }
  }
  if (!p.has_witness) return;
  if (!is_value) {
    __syncwarp();
    WriteKeyWitness(resid, L, lane, p.dst.k_witness + vec * L.num_bands, p.dst.k_witness_unit + vec);
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

}  // namespace witcert::kv_write
