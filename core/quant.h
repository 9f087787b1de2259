// Reference dequantizers and quantizers for the GGUF block types. Every backend's tests use these as truth.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace tandem {

// x[0..n) = dequantized row. n must be a multiple of the type's block size.
// Supports every type in DType (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q6_K, Q8_K, MXFP4).
void DequantizeRow(DType type, const void* src, float* dst, int64_t n);

// Weight quantizers (round-to-nearest with the usual scale search, good enough for synthetic models):
// F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (Q5_0 and Q5_1 are llama.cpp's fallbacks for rows a
// K-quant super-block does not divide), and MXFP4 (bit for bit ggml's quantize_row_mxfp4_ref, which has no search:
// both efforts are the same). Returns Unimplemented for other types.
// kFast tries one round-to-nearest scale per block instead of searching: for synthetic benchmark models,
// where the error does not matter but generating billions of weights must stay quick.
enum class QuantizeEffort { kBest, kFast };
absl::Status QuantizeRow(DType type, const float* src, void* dst, int64_t n,
                         QuantizeEffort effort = QuantizeEffort::kBest);
bool CanQuantize(DType type);

// Activation quantizers with llama.cpp's rounding, used before integer dot products:
// Q8_0: per 32, d = max|x| / 127 stored as fp16, q = round(x * (127 / max|x|)) to nearest, ties to even
// (llama.cpp's x86 SIMD path; its scalar reference would round ties away from zero).
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n);
// Q8_1 (for Q4_1/Q5_1): the same d and q as Q8_0, plus s = fp16(d * sum(q)).
void QuantizeRowQ8_1(const float* x, BlockQ8_1* y, int64_t n);
// Q8_K: per 256, iscale = -127 / x_m where x_m is the signed element of largest magnitude,
// q = min(127, round(iscale * x)) with ties to even, d = 1 / iscale (F32), bsums = sums of groups of 16.
void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n);

// Q4_K/Q5_K: the 6-bit scale and min of sub-block j (0..7) from a block's 12 packed scale bytes.
void KScaleMin(const uint8_t* scales, int j, int* scale, int* min);

// The activation type a weight type's dot product runs against, as in llama.cpp's CPU backend:
// F32 -> F32, F16 -> F16, BF16 -> BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/MXFP4 -> Q8_0 (Q8_1 for Q4_1/Q5_1),
// K-quants -> Q8_K.
DType VecDotType(DType weight_type);

}  // namespace tandem
