// Repacked quantized rows (repack.h) back to values, for products that multiply dense tiles (onednn_matmul.cc's
// AMX route for quantized weights). The packed layout keeps 16 rows side by side, so the natural tile is
// column-major in rows: one column's values of 16 rows are one 16-wide vector.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {

// Whether DequantizePacked takes w: a packed matrix (IsPacked) of a type repack.h lays out.
bool CanDequantizePacked(const WeightMatrix& w);

// Row groups g0..g0 + n_groups of the packed w (16 rows each) as bf16 (rounded to nearest even from the values
// DequantizeRow gives for the GGUF rows), into out[c * ld + 16 * (g - g0) + r] = W[16 g + r][c]: column c of the
// tile's rows is ld values from column c - 1 (ld >= 16 * n_groups). One thread; callers split the groups.
void DequantizePacked(const WeightMatrix& w, int64_t g0, int64_t n_groups, bf16_t* out, int64_t ld);

namespace internal {

// The naive reference, in f32: the values DequantizeRow gives for the GGUF rows, bit for bit.
void DequantizePackedRef(const WeightMatrix& w, int64_t g0, int64_t n_groups, float* out, int64_t ld);
// AVX-512 (with AVX512_BF16); call only where DetectedIsa() == kAvx512 and the CPU has it. Equals the reference
// rounded to bf16, bit for bit.
void Avx512DequantizePacked(const WeightMatrix& w, int64_t g0, int64_t n_groups, bf16_t* out, int64_t ld);

}  // namespace internal
}  // namespace tandem::cpu
