// Internal to cpu_backend: the activation layout MatMul quantizes into, and per-ISA tables of
// row-by-activations dot products.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu::internal {

// Tokens one kernel call handles: each weight block is loaded once and used against this many activation rows.
constexpr int kTokTile = 4;
// Weight bytes per row chunk when many tokens pass over it: well inside L2 (1-2 MiB on current x86 cores).
constexpr size_t kChunkBytesPrefill = 256 << 10;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kMinParallelWork = 1 << 16;

// ---- Activation rows (MatMul's scratch), one per token, in the weight type's vec-dot type ----
// The values are exactly those of the core quantizers (core/quant.h); only the storage differs where that helps
// the kernels:
//   F32:        the caller's floats, used in place (no scratch).
//   F16:        n floats, each rounded through fp16 (the fp16 values, widened once instead of per row).
//   BF16:       n bf16 values.
//   Q8_0, Q8_1: split for whole-cache-line loads: n int8 quants qs; n/32 float scales d (the fp16 block scale,
//               widened); n/32 float s (Q8_1: the fp16 d * sum(q), widened; unused for Q8_0).
//   Q8_0 for Q4_0, Q5_0 and MXFP4 weights ("nibble order"), whose quants come as 16 bytes of nibble pairs
//               per block: qs is reordered within each group of 4 blocks (the last group may have fewer, g)
//               to the low halves (elements 0..15) of the g blocks, then their high halves (16..31), so one
//               register of low nibbles of 4 blocks meets one load of x. Then d and s as above, then n/8 int32 c:
//               c[4b + j] = -offset * (sum of x_b[4j..4j+3] and x_b[16+4j..16+4j+3]) for block b, with the
//               weight type's offset (8, 16; kMxfp4Offset below for MXFP4): a dot product of the unsigned
//               weight quants that starts from c lands on the signed result, one int32 lane per j of each block.
//   Q8_K:       n/256 BlockQ8_K, as stored.
struct Act32 {
  const int8_t* qs;  // [n]
  const float* d;    // [n / 32]
  const float* s;    // [n / 32], Q8_1 only
  const int32_t* c;  // [n / 8], nibble order only
};
// In an unnamed namespace: this header is compiled with different -m flags per file, and the linker must not
// merge an AVX-512 copy of an inline function into portable code.
namespace {
inline Act32 ViewAct32(const void* row, int64_t n) {
  const auto* base = static_cast<const uint8_t*>(row);
  const auto* d = reinterpret_cast<const float*>(base + n);
  return {reinterpret_cast<const int8_t*>(base), d, d + n / 32, reinterpret_cast<const int32_t*>(d + n / 16)};
}
// Nibble order: where elements 16h..16h+15 (h = 0, 1) of block b start in qs, for a row of nb blocks.
inline int64_t NibbleHalfOffset(int64_t nb, int64_t b, int h) {
  const int64_t first = b / 4 * 4;                   // the group's first block
  const int64_t g = nb - first < 4 ? nb - first : 4;  // blocks in the group
  return 32 * first + 16 * (h * g + (b - first));
}
}  // namespace

// MXFP4 quants as the SIMD kernels multiply them: kMxfp4Values + kMxfp4Offset, in 0..24, so that they can be the
// unsigned operand of the byte products; the c array of the nibble-order activations takes the offset off.
constexpr int kMxfp4Offset = 12;
namespace {
struct Mxfp4Lut {
  alignas(16) uint8_t v[16];
};
constexpr Mxfp4Lut MakeMxfp4Lut() {
  Mxfp4Lut t{};
  for (int q = 0; q < 16; ++q) t.v[q] = static_cast<uint8_t>(kMxfp4Values[q] + kMxfp4Offset);
  return t;
}
constexpr Mxfp4Lut kMxfp4Lut = MakeMxfp4Lut();
}  // namespace

// Converts one float row to vec-dot type `vdt` in the layout above, less the nibble-order reordering and c array.
void ConvertActivationRow(DType vdt, const float* x, void* dst, int64_t n, Isa isa);
// Bytes of one activation row of n elements for weights of type `wtype` (0 for F32).
size_t ActivationRowBytes(DType wtype, int64_t n);
// Converts one float row into the layout above for weights of type `wtype` (not for F32). Uses SIMD when `isa`
// allows; every path gives the same bytes.
void QuantizeActivationRow(DType wtype, const float* x, void* dst, int64_t n, Isa isa);
// The AVX2 conversions behind it, by vec-dot type (the c array is not theirs); false for a type they do not
// handle. Call only when DetectedIsa() >= kAvx2.
bool Avx2QuantizeActivationRow(DType vdt, const float* x, void* dst, int64_t n);
// Q8_0 blocks written with a stride, as the packed kernels' activation units hold them (repack.h): block b's 32
// quants at qs + b * stride, its scale (the fp16 value, widened) at d + b * stride and -offset * sum(quants) at
// aux + b * stride. The values of ConvertActivationRow's Q8_0. AVX2; call only when DetectedIsa() >= kAvx2.
struct Q8_0Strided {
  uint8_t* qs;
  uint8_t* d;
  uint8_t* aux;
  size_t stride;  // bytes
};
void Avx2QuantizeQ8_0Strided(const float* x, int64_t n, int32_t offset, const Q8_0Strided& out);

// ---- Dot products ----
// For j < n_x (1..kTokTile): out[j * out_stride] = dot(w, x + j * x_stride) over n elements, where w is one
// weight row and x rows are activation rows as above. n is a multiple of the block size; plain float types
// take any n.
using VecDotFn = void (*)(int64_t n, const void* w, const void* x, size_t x_stride, int n_x, float* out,
                          size_t out_stride);

// nullptr where that ISA has no kernel for the type (the caller falls back to a lower ISA).
VecDotFn ScalarVecDot(DType wtype);
VecDotFn Avx2VecDot(DType wtype);    // call only when DetectedIsa() >= kAvx2
VecDotFn Avx512VecDot(DType wtype);  // call only when DetectedIsa() == kAvx512
// Whether Avx512VecDot's kernel for wtype prefetches its row ahead itself on one-token calls (the K-quants);
// MatMul prefetches the rows of the others.
bool Avx512VecDotPrefetches(DType wtype);

// MatMul under an affinity: whether `thread` (of n_threads) serves ranges[range] in pass 0 (its own node's) or
// pass 1 (ranges of nodes without a thread).
bool ServesRange(const MatMulAffinity& a, int n_threads, int thread, int range, int pass);

// The kernel MatMul uses for `wtype` under `isa` (best available at or below it).
VecDotFn PickVecDot(DType wtype, Isa isa);

}  // namespace tandem::cpu::internal
