// Branch-light fp16 conversions the compiler can inline and vectorise inside kernel loops. They give the same
// results as core/dtype.h's F16ToF32 / F32ToF16 (which are out-of-line and meant for bulk, not hot, loops);
// ops_test checks that bit for bit.
#pragma once

#include <bit>
#include <cstdint>

#include "core/dtype.h"

namespace tandem::cpu {

// fp16 bits -> float. Moving exponent and mantissa into float position and scaling by 2^112 re-biases the
// exponent (15 -> 127) and turns fp16 subnormals into exact float normals; Inf/NaN keep an all-ones exponent.
inline float HalfToFloat(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  const uint32_t shifted = magnitude << 13;
  const float scaled = std::bit_cast<float>(shifted) * 0x1p112f;
  const uint32_t finite_bits = std::bit_cast<uint32_t>(scaled);
  const uint32_t bits = magnitude >= 0x7c00u ? (shifted | 0x7f800000u) : finite_bits;
  return std::bit_cast<float>(bits | sign);
}

// x rounded to the nearest fp16 value (ties to even), returned as a float: F16ToF32(F32ToF16(x)).
inline float RoundThroughHalf(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u ^ sign;
  uint32_t r;
  if (a > 0x7f800000u) {
    return x;  // NaN stays NaN
  } else if (a >= 0x477ff000u) {
    r = 0x7f800000u;  // >= 65520 (half-way above the largest half, 65504) rounds to Inf
  } else if (a >= 0x38800000u) {
    // Normal fp16 range: keep 10 mantissa bits, round to nearest even on the 13 dropped bits.
    r = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;
  } else {
    // Subnormal fp16 range: multiples of 2^-24. Adding 0.5 puts the value in a binade whose ulp is 2^-24,
    // so the float addition itself rounds (to nearest even); subtracting 0.5 back is exact.
    r = std::bit_cast<uint32_t>((std::bit_cast<float>(a) + 0.5f) - 0.5f);
  }
  return std::bit_cast<float>(r | sign);
}

}  // namespace tandem::cpu
