#include "core/dtype.h"

#include <array>
#include <cctype>

namespace tandem {
namespace {

constexpr std::array<DTypeTraits, 16> kTraits = {{
    {DType::kF32, "F32", 1, 4},
    {DType::kF16, "F16", 1, 2},
    {DType::kQ4_0, "Q4_0", kQK4_0, sizeof(BlockQ4_0)},
    {DType::kQ4_1, "Q4_1", kQK4_1, sizeof(BlockQ4_1)},
    {DType::kQ5_0, "Q5_0", kQK5_0, sizeof(BlockQ5_0)},
    {DType::kQ5_1, "Q5_1", kQK5_1, sizeof(BlockQ5_1)},
    {DType::kQ8_0, "Q8_0", kQK8_0, sizeof(BlockQ8_0)},
    {DType::kQ8_1, "Q8_1", kQK8_1, sizeof(BlockQ8_1)},
    {DType::kQ2_K, "Q2_K", kQK_K, sizeof(BlockQ2_K)},
    {DType::kQ3_K, "Q3_K", kQK_K, sizeof(BlockQ3_K)},
    {DType::kQ4_K, "Q4_K", kQK_K, sizeof(BlockQ4_K)},
    {DType::kQ5_K, "Q5_K", kQK_K, sizeof(BlockQ5_K)},
    {DType::kQ6_K, "Q6_K", kQK_K, sizeof(BlockQ6_K)},
    {DType::kQ8_K, "Q8_K", kQK_K, sizeof(BlockQ8_K)},
    {DType::kBF16, "BF16", 1, 2},
    {DType::kMXFP4, "MXFP4", kQKMXFP4, sizeof(BlockMXFP4)},
}};

}  // namespace

std::optional<DTypeTraits> TraitsOf(uint32_t type_id) {
  for (const DTypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type_id) return t;
  }
  return std::nullopt;
}

const DTypeTraits& Traits(DType t) {
  for (const DTypeTraits& tr : kTraits) {
    if (tr.type == t) return tr;
  }
  __builtin_trap();  // callers validate type ids at the file boundary
}

std::string_view DTypeName(DType t) { return Traits(t).name; }

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const DTypeTraits& tr : kTraits) {
    if (tr.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size(); ++i) {
      if (std::toupper(static_cast<unsigned char>(name[i])) != tr.name[i]) eq = false;
    }
    if (eq) return tr.type;
  }
  return std::nullopt;
}

float F16ToF32(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float E8M0HalfToF32(uint8_t e) {
  // 2^(e - 128): the exponent field e - 1 for e >= 2; below that the subnormals 2^-128 (bit 21) and 2^-127 (bit 22).
  const uint32_t u = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16_t F32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<f16_t>(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000u) return static_cast<f16_t>(sign | 0x7c00);  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<f16_t>(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) ... yields 24-bit -> 10-bit subnormal
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return static_cast<f16_t>(sign | r);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1) - 0x38000000u;  // rebias and round to nearest even
  return static_cast<f16_t>(sign | (r >> 13));
}

}  // namespace tandem
