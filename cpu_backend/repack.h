// Repacked weights: 16 rows interleaved block by block, so that one 512-bit register holds the same 4 quants of
// 16 rows and one VNNI dot-product instruction (vpdpbusd: unsigned weight bytes times signed activation bytes)
// advances 16 output rows at once against a broadcast group of 4 activations. The CPU backend makes this copy
// of the matrices it computes with at load (CpuBackend::PrepareMatMulWeights); the original GGUF bytes stay
// what the GPU and the file see. Values are exactly those of the GGUF blocks; only the order differs.
//
// A packed matrix is rows / 16 groups, one after another; a group is its blocks in column order:
//   Q4_0, per block of 32 (288 bytes, as 16 GGUF blocks):
//     f16 d[16]                 the rows' scales
//     u8  qs[4][16][4]          register j, row r, byte i = the row's GGUF qs[4j + i]: low nibble quant 4j + i,
//                               high nibble quant 16 + 4j + i (unsigned, value = d * (q - 8))
//   Q8_0, per block of 32 (544 bytes, as 16 GGUF blocks):
//     f16 d[16]
//     u8  qs[8][16][4]          register j, row r, byte i = quant 4j + i + 128 (value = d * (qs - 128))
//   MXFP4, per block of 32 (272 bytes, as 16 GGUF blocks):
//     u8  e[16]                 the rows' E8M0 scales
//     u8  qs[4][16][4]          as Q4_0's, each nibble q an index into kMxfp4Values
//                               (value = 2^(e - 128) * kMxfp4Values[q])
//   The K-quants, per super-block of 256: a 320-byte head of scales, then 8 chunks of 32 quants (chunk k: quants
//   32k..32k+31) of 256 + 64 B bytes, B the bits of a quant above its low 4 (Q4_K 0, Q5_K 1, Q6_K 2):
//     u8  qs[4][16][4]          register c, row r, byte i: low nibble = the low 4 bits of the chunk's quant
//                               4c + i, high nibble those of quant 16 + 4c + i
//     u8  qh[B][16][4]          row r, byte i: the high bits of the chunk's quant 16h + 4c + i at bit
//                               p = B * (4h + c) of the B registers' bytes: register p / 8, bit p % 8
//   so a shift and a mask (Q5_K, Q6_K) or a mask alone (Q4_K) put 4 quants of 16 rows in one register.
//   Q4_K (2368 bytes; 16 GGUF blocks take 2304), B = 0:
//     f16 d[16], dmin[16]
//     u8  sc[8][16]             sub-block (chunk) j's 6-bit scale, row r
//     u8  m[4][16][2]           pair p, row r: the mins of sub-blocks 2p and 2p + 1
//     chunks                    (value = d * sc * q - dmin * m)
//   Q5_K (2880 bytes; 16 GGUF blocks take 2816), B = 1: head as Q4_K's, values as Q4_K's with 5-bit q.
//   Q6_K (3392 bytes; 16 GGUF blocks take 3360), B = 2:
//     f16 d[16], u8 pad[32]     (the padding keeps the chunks' registers on cache lines)
//     i8  sc[16][16]            sub-block of 16 j's scale, row r (chunk k holds sub-blocks 2k and 2k + 1)
//     chunks                    (value = d * sc * (q - 32))
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {

constexpr int kPackRows = 16;

// True when `w` can be repacked: a supported type and rows a multiple of 16.
bool CanRepack(const WeightMatrix& w);
// Bytes of the packed copy of `w` (CanRepack(w) must hold).
size_t PackedBytes(const WeightMatrix& w);
// Writes the packed copy of `w` to dst (PackedBytes(w) bytes) and returns its view (packed = true). Threads with
// OpenMP over row groups.
WeightMatrix Repack(const WeightMatrix& w, void* dst);

namespace internal {

// Bytes of one packed group's block (Q4_0, Q8_0, MXFP4: a block of 32; K-quants: a super-block of 256).
size_t PackedBlockBytes(DType type);
// The packed K-quant layout's shape (above): high bits a quant, the head's and a chunk's bytes.
constexpr size_t kKHeadBytes = 320;
constexpr int KHighBits(DType type) { return type == DType::kQ6_K ? 2 : type == DType::kQ5_K ? 1 : 0; }
constexpr size_t KChunkBytes(DType type) { return 256 + 64 * static_cast<size_t>(KHighBits(type)); }
constexpr size_t KBlockBytes(DType type) { return kKHeadBytes + 8 * KChunkBytes(type); }
constexpr bool IsPackedKQuant(DType type) {
  return type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K;
}
// The blocks of 32 (Q4_0, Q8_0, MXFP4): a packed block's bytes, where its quants start (after the scales), and the
// activations' offset (above).
constexpr size_t Block32QuantsAt(DType type) { return type == DType::kMXFP4 ? 16 : 32; }
constexpr size_t Block32Bytes(DType type) { return Block32QuantsAt(type) + (type == DType::kQ8_0 ? 512 : 256); }
int32_t Block32Offset(DType type);

// ---- Activations for the packed kernels ----
// Tokens go in tiles of up to kPackedTokTile. A tile's capacity is kPackedTokTile, or 1 for a single token, whose
// activations then stay compact enough for L1 while every row group passes over them. Within a tile the
// activations are stored unit by unit (a unit is a block of 32 for Q4_0/Q8_0/MXFP4, a super-block of 256 for the
// K-quants), so every token of the tile sits at a fixed offset from the unit's start and the kernels need one
// address register, not one per token. A unit holds
//   int8  qs[capacity][Q]         the llama.cpp activation quants (Q8_0 for Q4_0/Q8_0/MXFP4 weights, Q8_K for
//                                 K-quants)
//   float d[capacity]             their scale
//   int32 aux[capacity][A]        Q4_0/Q8_0/MXFP4 (A = 1): -offset * sum(qs), offset 8, 128 or kMxfp4Offset
//                                 (Block32Offset), so that a dot product of the unsigned packed quants (MXFP4's
//                                 through kMxfp4Lut) that starts from it lands on the signed result;
//                                 Q4_K/Q5_K (A = 4): the 8 int16 sums of the unit's sub-blocks of 32;
//                                 Q6_K (A = 16): -32 * the sum of each sub-block of 16, the same offset start
// Slots past the tokens of a partial last tile are never read.
constexpr int kPackedTokTile = 16;
struct PackedActUnit {
  int64_t quants;   // Q
  size_t d_offset;  // bytes from the unit's start
  size_t aux_offset;
  size_t aux_bytes;  // per token
  size_t bytes;
};
PackedActUnit PackedActUnitOf(DType wtype, int capacity);
// Bytes of one tile of activation rows of n elements.
size_t PackedActTileBytes(DType wtype, int64_t n, int capacity);
// Quantizes one float row into slot `slot` of the tile at `tile`.
void QuantizePackedAct(DType wtype, const float* x, int64_t n, uint8_t* tile, int capacity, int slot, Isa isa);

// One group of 16 rows against the first n_x tokens of a tile of `capacity` (1 or kPackedTokTile):
// y[t * y_stride + r], r < 16. nb counts the type's blocks (super-blocks for K-quants) in a row.
using PackedKernelFn = void (*)(const uint8_t* group, int64_t nb, const uint8_t* tile, int capacity, int n_x,
                                float* y, size_t y_stride);
PackedKernelFn ScalarPackedKernel(DType wtype);
PackedKernelFn Avx512PackedKernel(DType wtype);  // call only when DetectedIsa() == kAvx512
// Decode: one token (a tile of capacity 1) against `streams` groups read side by side, y[g][r] for r < 16. No
// function when the type reads its weights fastest one group at a time (none does at present); the products equal
// the one-group kernel's.
constexpr int kMaxDecodeStreams = 4;
struct PackedDecode {
  // prefetch: how many bytes ahead of each run to prefetch (DecodePrefetchBytes), 0 for none.
  void (*fn)(const uint8_t* const* groups, int64_t nb, const uint8_t* tile, float* const* y, size_t prefetch) = nullptr;
  int streams = 0;  // groups per call, at most kMaxDecodeStreams
};
PackedDecode Avx512PackedDecode(DType wtype);  // call only when DetectedIsa() == kAvx512

}  // namespace internal
}  // namespace tandem::cpu
