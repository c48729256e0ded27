// Bit-exact conversions between fp32 and the small float formats the KV codecs store
// (fp16, bf16, fp8 e4m3), with round-to-nearest-even for data and round-UP variants for
// witnesses and scales.
//
// Why hand-written: the certificate needs stored witnesses ≥ the true norm (round up, never
// to nearest), which no intrinsic offers, and the CPU and CUDA paths must agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/meter/hd.h"

namespace witcert::meter {

WITCERT_HD inline uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
WITCERT_HD inline float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- fp16 (IEEE binary16) ---------------------------------------------------------------
WITCERT_HD inline float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: man · 2^-24, exact in fp32
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return BitsFloat(sign | 0x7f800000u | (man << 13));
  return BitsFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round to nearest even; overflow → ±inf, NaN preserved.
WITCERT_HD inline uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // ≥ 65520 rounds to inf
  if (ax < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    // value / 2^-24, rounded to nearest even integer
    float v = BitsFloat(ax) * 16777216.0f;  // exact scaling by 2^24
    uint32_t m = static_cast<uint32_t>(v);
    float rem = v - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t e = (ax >> 23) - 112u;
  uint32_t man = ax & 0x7fffffu;
  uint32_t h = (e << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump exponent: fine
  return static_cast<uint16_t>(sign | h);
}

// Smallest fp16 ≥ f (round toward +inf). For witnesses and scales, which must not shrink.
WITCERT_HD inline uint16_t FloatToHalfUp(float f) {
  uint16_t h = FloatToHalf(f);
  float back = HalfToFloat(h);
  if (back < f) {  // step one representable value toward +inf
    if (h == 0x8000u) return 0x0001u;
    if (h & 0x8000u) return static_cast<uint16_t>(h - 1u);
    return static_cast<uint16_t>(h + 1u);  // 0x7bff + 1 = +inf
  }
  return h;
}

// Saturating fp16 cast (used by the fp16 codec so a residual stays finite).
WITCERT_HD inline uint16_t FloatToHalfSat(float f) {
  if (f > 65504.0f) return 0x7bffu;
  if (f < -65504.0f) return 0xfbffu;
  return FloatToHalf(f);
}

// ---- bf16 -------------------------------------------------------------------------------
WITCERT_HD inline float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

WITCERT_HD inline uint16_t FloatToBf16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

// Smallest bf16 ≥ f, for f ≥ 0 (scales). Negative inputs are not used.
WITCERT_HD inline uint16_t FloatToBf16Up(float f) {
  uint32_t x = FloatBits(f);
  uint16_t b = static_cast<uint16_t>(x >> 16);
  if ((x & 0xffffu) != 0 && !(x & 0x80000000u)) ++b;
  return b;
}

// ---- fp8 e4m3 (OCP "fn": no inf, max ±448, NaN = 0x7f/0xff) ---------------------------
WITCERT_HD inline float Fp8E4M3ToFloat(uint8_t b) {
  uint32_t sign = b & 0x80u;
  uint32_t exp = (b >> 3) & 0xfu;
  uint32_t man = b & 0x7u;
  float v;
  if (exp == 0) {
    v = static_cast<float>(man) * 0.001953125f;  // man · 2^-9
  } else if (exp == 15 && man == 7) {
    v = BitsFloat(0x7fc00000u);
  } else {
    v = BitsFloat(((exp + 120u) << 23) | (man << 20));
  }
  return sign ? -v : v;
}

// Round to nearest even, saturating to ±448 (no overflow to NaN).
WITCERT_HD inline uint8_t FloatToFp8E4M3Sat(float f) {
  uint32_t x = FloatBits(f);
  uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  float a = BitsFloat(x & 0x7fffffffu);
  if (!(a == a)) return static_cast<uint8_t>(sign | 0x7fu);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7eu);
  if (a < 0.015625f) {  // below 2^-6: subnormal, step 2^-9
    float v = a * 512.0f;
    uint32_t m = static_cast<uint32_t>(v);
    float rem = v - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint8_t>(sign | m);  // m == 8 is exactly 2^-6 (exp 1, man 0)
  }
  uint32_t ax = FloatBits(a);
  uint32_t e = (ax >> 23) - 120u;
  uint32_t man = ax & 0x7fffffu;
  uint32_t r = (e << 3) | (man >> 20);
  uint32_t rest = man & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (r & 1u))) ++r;
  if (r > 0x7eu) r = 0x7eu;  // 464 rounds past 448: saturate
  return static_cast<uint8_t>(sign | r);
}

}  // namespace witcert::meter
