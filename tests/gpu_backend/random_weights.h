// Random weight rows of every supported type, for the GPU tests and the GPU benchmark. Quantized rows are random
// bytes with their scale fields replaced by finite values of a sensible size, so every quant bit pattern occurs
// and the dequantized values stay finite; plain float rows are N(0, 1/sqrt(cols)) values.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace tandem::test {

struct ScaleField {
  size_t offset;   // byte offset inside the block
  float magnitude; // typical |value|
  bool is_f32;     // float scale (Q8_K) rather than fp16
  bool positive;   // mins are stored positive
  bool is_e8m0;    // a power-of-two exponent byte (MXFP4) rather than fp16: the nearest power of two is stored
};

// Where each block type keeps its scales (core/dtype.h layouts) and how large they should be so that the
// dequantized weights have a magnitude of about 0.01..0.3.
inline std::vector<ScaleField> ScaleFieldsOf(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
      return {{0, 0.02f, false, false}};
    case DType::kQ8_0:
      return {{0, 0.002f, false, false}};
    case DType::kQ4_1:
    case DType::kQ5_1:
      return {{0, 0.02f, false, false}, {2, 0.1f, false, false}};
    case DType::kQ8_1:
      return {{0, 0.002f, false, false}, {2, 0.2f, false, false}};
    case DType::kQ2_K:
      return {{80, 0.01f, false, false}, {82, 0.005f, false, true}};
    case DType::kQ3_K:
      return {{108, 0.005f, false, false}};
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {{0, 0.003f, false, false}, {2, 0.002f, false, true}};
    case DType::kQ6_K:
      return {{208, 0.0002f, false, false}};
    case DType::kQ8_K:
      return {{0, 0.002f, true, false}};
    case DType::kMXFP4:  // the factor of the doubled E2M1 values, which reach 12
      return {{0, 0.01f, false, true, true}};
    default:
      return {};
  }
}

// rows x cols weights of type t, row_stride bytes apart (0 = packed). cols must suit the block size.
inline std::vector<uint8_t> RandomWeightRows(DType t, int64_t rows, int64_t cols, uint64_t seed,
                                             size_t row_stride = 0) {
  const size_t row_bytes = RowBytes(t, cols);
  if (row_stride == 0) row_stride = row_bytes;
  std::vector<uint8_t> out(row_stride * static_cast<size_t>(rows), 0);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.5f, 1.5f);
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  const DTypeTraits& tr = Traits(t);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = out.data() + static_cast<size_t>(r) * row_stride;
    if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = normal(rng);
        if (t == DType::kF32) {
          std::memcpy(row + 4 * c, &v, 4);
        } else {
          const uint16_t h = t == DType::kF16 ? F32ToF16(v) : F32ToBf16(v);
          std::memcpy(row + 2 * c, &h, 2);
        }
      }
      continue;
    }
    for (size_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(rng());
    const std::vector<ScaleField> fields = ScaleFieldsOf(t);
    for (int64_t b = 0; b < cols / tr.block_elems; ++b) {
      uint8_t* block = row + static_cast<size_t>(b) * tr.block_bytes;
      for (const ScaleField& f : fields) {
        float v = f.magnitude * unit(rng);
        if (!f.positive && (rng() & 1)) v = -v;
        if (f.is_e8m0) {
          block[f.offset] = static_cast<uint8_t>(128 + std::lround(std::log2(v)));
        } else if (f.is_f32) {
          std::memcpy(block + f.offset, &v, 4);
        } else {
          const uint16_t h = F32ToF16(v);
          std::memcpy(block + f.offset, &h, 2);
        }
      }
    }
  }
  return out;
}

// Every weight type the backends accept.
inline std::vector<DType> AllWeightTypes() {
  return {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
          DType::kQ8_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K,
          DType::kMXFP4};
}

}  // namespace tandem::test
