// Device decode functions, one struct per KV scheme: what the decode kernel is templated on.
//
// Each lane of the decode kernel owns 8 consecutive channels [ch0, ch0+8) of one cached
// vector and loads their codes with one vector load of kBytes (= bits per channel) bytes.
// Decode8 turns them into CODE-DOMAIN floats x_c with the stored value k̃_c = s·x_c, where s
// is the lane's bf16 scale (1 for unscaled formats). Products of a bf16 scale and an int8,
// int4 or fp8 code are exact in fp32, so s·Σ q_c x_c is q·k̃ up to the dot's own rounding
// (covered by η, cert_math.h); for int8-dither keys x_c = m_c − ξ_c, exact.
// kGroupScale: lanes of one vector hold different scales (int4 groups of 32).
// kAffineParams (kivi2): Decode8 returns the stored value itself, x_c = z_c + s_c·m_c, from
// fp16 parameters it loads at DecodeCtx::params (KeyParams / ValueParams below).
// Every conversion is exact (hardware fp16/fp8 converts, the 2^23 magic for integers).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/f16_digits.cuh"
#include "kernels/cuda/kv_scheme_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/dither_hash.h"
#include "kernels/meter/partial_sum.h"

namespace witcert::cuda_kv {

// Words of one lane's code chunk (2-bit codes: half a word).
template <int BYTES>
inline constexpr int kChunkWords = (BYTES + 3) / 4;

// Loads `BYTES` (2, 4, 8, 16 or 32) bytes at a suitably aligned address.
template <int BYTES>
__device__ __forceinline__ void LoadChunk(const uint8_t* p, uint32_t (&w)[kChunkWords<BYTES>]) {
  if constexpr (BYTES == 32) {
    uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
    uint4 b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
  } else if constexpr (BYTES == 16) {
    uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
  } else if constexpr (BYTES == 8) {
    uint2 a = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = a.x; w[1] = a.y;
  } else if constexpr (BYTES == 4) {
    w[0] = __ldg(reinterpret_cast<const uint32_t*>(p));
  } else {
    static_assert(BYTES == 2, "chunk of 2, 4, 8, 16 or 32 bytes");
    w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
  }
}

// Signed byte → float, exact: 2^23 + (b + 128) − (2^23 + 128).
__device__ __forceinline__ float SignedByteToFloat(uint32_t word, int j) {
  uint32_t biased = ((word >> (8 * j)) & 0xffu) ^ 0x80u;
  return __uint_as_float(0x4B000000u | biased) - 8388736.0f;
}

struct DecodeCtx {
  uint64_t token_hash;  // DitherTokenHash of this vector (int8-dither only)
  int32_t ch0;          // first channel of the lane
  bool is_value;
  const uint16_t* params = nullptr;  // kAffineParams: KeyParams / ValueParams; null → zeros
};

struct DevFp32 {
  static constexpr KvScheme kScheme = KvScheme::kFp32;
  static constexpr int kBytes = 32;
  static constexpr bool kScaled = false, kTierB = false, kExact = true, kWideRange = true, kGroupScale = false,
                        kAffineParams = false;
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx&, float* x) {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = __uint_as_float(w[i]);
  }
};

struct DevFp16 {
  static constexpr KvScheme kScheme = KvScheme::kFp16;
  static constexpr int kBytes = 16;
  static constexpr bool kScaled = false, kTierB = false, kExact = false, kWideRange = false, kGroupScale = false,
                        kAffineParams = false;
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx&, float* x) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  }
};

struct DevBf16 {
  static constexpr KvScheme kScheme = KvScheme::kBf16;
  static constexpr int kBytes = 16;
  static constexpr bool kScaled = false, kTierB = false, kExact = false, kWideRange = true, kGroupScale = false,
                        kAffineParams = false;
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx&, float* x) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __uint_as_float(w[i] << 16);
      x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};

__device__ __forceinline__ void Fp8x8ToFloat(const uint32_t* w, float* x) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>((w[i / 2] >> (16 * (i & 1))) & 0xffffu);
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

struct DevFp8Raw {
  static constexpr KvScheme kScheme = KvScheme::kFp8Raw;
  static constexpr int kBytes = 8;
  static constexpr bool kScaled = false, kTierB = false, kExact = false, kWideRange = false, kGroupScale = false,
                        kAffineParams = false;
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx&, float* x) { Fp8x8ToFloat(w, x); }
};

struct DevFp8Scaled {
  static constexpr KvScheme kScheme = KvScheme::kFp8Scaled;
  static constexpr int kBytes = 8;
  static constexpr bool kScaled = true, kTierB = false, kExact = false, kWideRange = false, kGroupScale = false,
                        kAffineParams = false;
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx&, float* x) { Fp8x8ToFloat(w, x); }
};

struct DevInt8Rtn {
  static constexpr KvScheme kScheme = KvScheme::kInt8Rtn;
  static constexpr int kBytes = 8;
  static constexpr bool kScaled = true, kTierB = false, kExact = false, kWideRange = false, kGroupScale = false,
                        kAffineParams = false;
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx&, float* x) {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = SignedByteToFloat(w[i / 4], i % 4);
  }
};

// Keys: x_c = m_c − ξ_c with ξ from the lane's two dither words (meter/dither_hash.h), exact:
// ξ = b/256 − 255/512 from the byte b (2^23 + b by prmt, less 2^23), then m − ξ. Values: the
// codes as int8-rtn's (the codec dithers keys only).
struct DevInt8Dither {
  static constexpr KvScheme kScheme = KvScheme::kInt8Dither;
  static constexpr int kBytes = 8;
  static constexpr bool kScaled = true, kTierB = true, kExact = false, kWideRange = false, kGroupScale = false,
                        kAffineParams = false;
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx& ctx, float* x) {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = SignedByteToFloat(w[i / 4], i % 4);
    if (ctx.is_value) return;
    const uint32_t g = static_cast<uint32_t>(ctx.ch0) >> 2;
    const uint32_t dw[2] = {meter::DitherWord(ctx.token_hash, g), meter::DitherWord(ctx.token_hash, g + 1)};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float b = __uint_as_float(__byte_perm(dw[i / 4], 0x4B000000u, 0x7440u + (i % 4))) - 8388608.0f;
      x[i] = __fsub_rn(x[i], __fmaf_rn(b, 0.00390625f, -0.498046875f));
    }
  }
};

struct DevInt4Rtn {
  static constexpr KvScheme kScheme = KvScheme::kInt4Rtn;
  static constexpr int kBytes = 4;
  static constexpr bool kScaled = true, kTierB = false, kExact = false, kWideRange = false, kGroupScale = true,
                        kAffineParams = false;
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx&, float* x) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[i] = __uint_as_float(0x4B000000u | ((w[0] >> (4 * i)) & 0xfu)) - 8388616.0f;  // n − 8
    }
  }
};

// kivi2: 2-bit codes (channel ch0+i at bits 2i of the lane's 16-bit chunk). Keys: per-channel
// fp16 zeros and scales of the block by channel pairs, [d / 2][zeros, scales][2] (KeyGroupWord;
// ctx.params → the lane's 8 channels, 8 words); values: the vector's (zero, scale). x = z + s·m
// with s·m exact: the CPU codec's bits.
struct DevKivi2 {
  static constexpr KvScheme kScheme = KvScheme::kKivi2;
  static constexpr int kBytes = 2;
  static constexpr bool kScaled = false, kTierB = false, kExact = false, kWideRange = false, kGroupScale = false,
                        kAffineParams = true;
  // One fp16 (zero, scale) pair as a word (zero in the low half) → floats.
  __device__ __forceinline__ static void UnpackPair(uint32_t zs, float* z, float* s) {
    *z = F16LowHalf(zs);
    *s = F16HighHalf(zs);
  }
  // Code i of the lane's 16 bits as a float, exact: 2^23 + m − 2^23 (no conversion instruction).
  __device__ __forceinline__ static float Code(uint32_t codes, int i) {
    return __uint_as_float(0x4B000000u | ((codes >> (2 * i)) & 3u)) - 8388608.0f;
  }
  // x_i = z_i + s_i·m_i for the lane's 8 codes with channel ch0+i's parameters as floats.
  __device__ __forceinline__ static void DecodeWithFloats(uint32_t codes, const float (&z)[8], const float (&s)[8],
                                                          float* x) {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = __fadd_rn(z[i], __fmul_rn(s[i], Code(codes, i)));
  }
  // The lane's 8 channels' parameters as floats from their 8 words (KeyGroupWord from ch0: words
  // 2p and 2p + 1 the zeros and scales of channels 2p, 2p + 1).
  __device__ __forceinline__ static void UnpackPairs(const uint32_t (&words)[8], float (&z)[8], float (&s)[8]) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      UnpackPair(__byte_perm(words[2 * p], words[2 * p + 1], 0x5410), &z[2 * p], &s[2 * p]);
      UnpackPair(__byte_perm(words[2 * p], words[2 * p + 1], 0x7632), &z[2 * p + 1], &s[2 * p + 1]);
    }
  }
  // The same with one pair for all 8 channels (a value vector's).
  __device__ __forceinline__ static void DecodeWithPair(uint32_t codes, uint32_t zs, float* x) {
    float z[8], s[8];
    UnpackPair(zs, &z[0], &s[0]);
#pragma unroll
    for (int i = 1; i < 8; ++i) { z[i] = z[0]; s[i] = s[0]; }
    DecodeWithFloats(codes, z, s, x);
  }
  __device__ static void Decode8(const uint32_t* w, const DecodeCtx& ctx, float* x) {
    if (ctx.params == nullptr) {
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = 0.0f;
      return;
    }
    if (ctx.is_value) {
      DecodeWithPair(w[0], __ldg(reinterpret_cast<const uint32_t*>(ctx.params)), x);
    } else {
      const uint4 a = __ldg(reinterpret_cast<const uint4*>(ctx.params));
      const uint4 b = __ldg(reinterpret_cast<const uint4*>(ctx.params) + 1);
      const uint32_t pr[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      float z[8], s[8];
      UnpackPairs(pr, z, s);
      DecodeWithFloats(w[0], z, s, x);
    }
  }
};

// Where an affine-parameter codec's decode parameters live: the key group of (block, KV head)
// `unit` from channel ch0 on, or value vector `vec`'s pair; null for every other codec.
template <class C, int D>
__device__ __forceinline__ const uint16_t* KeyParams(const PagedKvLayer& kv, int64_t unit, int ch0) {
  if constexpr (C::kAffineParams) {
    return kv.k_group + unit * (2 * D) + 2 * ch0;
  } else {
    return nullptr;
  }
}
template <class C>
__device__ __forceinline__ const uint16_t* ValueParams(const PagedKvLayer& kv, int64_t vec) {
  if constexpr (C::kAffineParams) {
    return kv.v_scales + vec * 2;
  } else {
    return nullptr;
  }
}

// The one scheme → device codec table for the host launchers: calls fn(DevCodecTag<C>{})
// with the codec of `scheme` and returns its status; an unknown scheme returns an error with
// `unknown_scheme_error`. A new codec is added here, not at each kernel family's launcher.
template <class C>
struct DevCodecTag {
  using type = C;
};
template <class Fn>
CudaStatus WithDevCodec(KvScheme scheme, const char* unknown_scheme_error, Fn&& fn) {
  switch (scheme) {
    case KvScheme::kFp32: return fn(DevCodecTag<DevFp32>{});
    case KvScheme::kFp16: return fn(DevCodecTag<DevFp16>{});
    case KvScheme::kBf16: return fn(DevCodecTag<DevBf16>{});
    case KvScheme::kFp8Raw: return fn(DevCodecTag<DevFp8Raw>{});
    case KvScheme::kFp8Scaled: return fn(DevCodecTag<DevFp8Scaled>{});
    case KvScheme::kInt8Rtn: return fn(DevCodecTag<DevInt8Rtn>{});
    case KvScheme::kInt8Dither: return fn(DevCodecTag<DevInt8Dither>{});
    case KvScheme::kInt4Rtn: return fn(DevCodecTag<DevInt4Rtn>{});
    case KvScheme::kKivi2: return fn(DevCodecTag<DevKivi2>{});
    default: return CudaStatus::Error(unknown_scheme_error);
  }
}

}  // namespace witcert::cuda_kv
