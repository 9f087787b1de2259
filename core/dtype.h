// Tensor element types and the GGUF block formats (facts of the file format, laid out as stored).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tandem {

// Type ids as stored in GGUF tensor infos.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
  kMXFP4 = 39,  // OCP microscaling FP4 (gpt-oss's experts)
};

struct DTypeTraits {
  DType type;
  std::string_view name;  // "Q4_K", as llama.cpp spells it
  int64_t block_elems;    // elements per block (1 for plain floats)
  size_t block_bytes;     // bytes per block
};

// Traits of a supported type id, or nullopt for an unknown/unsupported id.
std::optional<DTypeTraits> TraitsOf(uint32_t type_id);
const DTypeTraits& Traits(DType t);  // t must be supported
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);  // case-insensitive, "q4_k" -> kQ4_K

// Bytes of one row of `n` elements; n must be a multiple of the block size.
inline size_t RowBytes(DType t, int64_t n) {
  const DTypeTraits& tr = Traits(t);
  return static_cast<size_t>(n / tr.block_elems) * tr.block_bytes;
}

// ---- IEEE half and bfloat16 ----
using f16_t = uint16_t;
using bf16_t = uint16_t;

inline float Bf16ToF32(bf16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline bf16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 64);
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<bf16_t>(u >> 16);
}
float F16ToF32(f16_t h);
f16_t F32ToF16(float f);  // round to nearest even
// An MXFP4 block's E8M0 scale byte as the factor of kMxfp4Values (which are the E2M1 values doubled): 2^(e - 128),
// ggml's ggml_e8m0_to_fp32_half. e = 0 and 1 give the float subnormals 2^-128 and 2^-127; e = 255, which the OCP
// spec reserves for NaN, gives 2^127 as in ggml.
float E8M0HalfToF32(uint8_t e);

// ---- Block formats (GGUF on-disk layout) ----
constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;
constexpr int kQKMXFP4 = 32;
constexpr int kQK_K = 256;           // super-block size of the K-quants
constexpr int kKScaleSize = 12;      // packed 6-bit scales/mins of Q4_K and Q5_K

#pragma pack(push, 1)
struct BlockQ4_0 {  // x = d * (q - 8); q[i] low nibble of qs[i], q[i+16] high nibble
  f16_t d;
  uint8_t qs[kQK4_0 / 2];
};
struct BlockQ4_1 {  // x = d * q + m
  f16_t d;
  f16_t m;
  uint8_t qs[kQK4_1 / 2];
};
struct BlockQ5_0 {  // x = d * (q - 16); 5th bit of element j in bit j of qh
  f16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
struct BlockQ5_1 {  // x = d * q + m
  f16_t d;
  f16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
struct BlockQ8_0 {  // x = d * q
  f16_t d;
  int8_t qs[kQK8_0];
};
struct BlockQ8_1 {  // x = d * q; s = d * sum(q)
  f16_t d;
  f16_t s;
  int8_t qs[kQK8_1];
};
struct BlockMXFP4 {  // x = E8M0HalfToF32(e) * kMxfp4Values[q]; q[i] low nibble of qs[i], q[i+16] high nibble
  uint8_t e;  // E8M0: a power of two, no sign or mantissa
  uint8_t qs[kQKMXFP4 / 2];
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // 4-bit scale (low) and min (high) per 16 elements
  uint8_t qs[kQK_K / 4];       // 2-bit quants
  f16_t d;                     // super-block scale for the scales
  f16_t dmin;                  // super-block scale for the mins
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // high bit of each quant
  uint8_t qs[kQK_K / 4];     // low 2 bits
  uint8_t scales[12];        // 16 6-bit scales
  f16_t d;
};
struct BlockQ4_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[kKScaleSize];  // 8 6-bit scales and 8 6-bit mins
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // 8-bit scales
  f16_t d;
};
struct BlockQ8_K {  // activation format of the K-quant dot products
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of qs in groups of 16
};
#pragma pack(pop)

// The values of an MXFP4 quant (E2M1: sign, 2 exponent bits, 1 mantissa bit), doubled so that they are integers
// (ggml's kvalues_mxfp4); q = 8 is negative zero, which is 0 here.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace tandem
