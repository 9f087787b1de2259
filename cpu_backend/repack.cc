// Repacking GGUF rows into 16-row interleaved groups, and the activation rows the packed kernels read.
// Layouts: repack.h.
#include "cpu_backend/repack.h"

#include <omp.h>

#include <cstring>
#include <type_traits>

#include "core/quant.h"
#include "core/status.h"
#include "cpu_backend/vec_dot.h"

namespace tandem::cpu {
namespace internal {

size_t PackedBlockBytes(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ8_0:
    case DType::kMXFP4: return Block32Bytes(type);
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return KBlockBytes(type);
    default: return 0;
  }
}

namespace {

// One block (super-block for K-quants) of 16 rows: rows[r] points at row r's GGUF block.
void PackBlockQ4_0(const uint8_t* const* rows, uint8_t* out) {
  auto* d = reinterpret_cast<f16_t*>(out);
  uint8_t* qs = out + 32;
  for (int r = 0; r < kPackRows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(rows[r]);
    d[r] = b->d;
    for (int j = 0; j < 4; ++j) std::memcpy(qs + 64 * j + 4 * r, b->qs + 4 * j, 4);
  }
}

// MXFP4: Q4_0's nibble placement, after the rows' scale bytes.
void PackBlockMXFP4(const uint8_t* const* rows, uint8_t* out) {
  uint8_t* qs = out + 16;
  for (int r = 0; r < kPackRows; ++r) {
    const auto* b = reinterpret_cast<const BlockMXFP4*>(rows[r]);
    out[r] = b->e;
    for (int j = 0; j < 4; ++j) std::memcpy(qs + 64 * j + 4 * r, b->qs + 4 * j, 4);
  }
}

void PackBlockQ8_0(const uint8_t* const* rows, uint8_t* out) {
  auto* d = reinterpret_cast<f16_t*>(out);
  uint8_t* qs = out + 32;
  for (int r = 0; r < kPackRows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(rows[r]);
    d[r] = b->d;
    // Four quants at a time; flipping the sign bit adds 128 to each.
    for (int j = 0; j < 8; ++j) {
      uint32_t word;
      std::memcpy(&word, b->qs + 4 * j, 4);
      word ^= 0x80808080u;
      std::memcpy(qs + 64 * j + 4 * r, &word, 4);
    }
  }
}

// Row r's 256 K-quants q[e] (0..63) into a packed super-block's chunks (repack.h). Each byte is made whole before
// it is stored: writing quant by quant, or-ing bits in, repacked about 5 times slower.
template <int B>
void PackKRow(const uint8_t* q, int r, uint8_t* chunks) {
  for (int k = 0; k < 8; ++k, q += 32, chunks += 256 + 64 * B) {
    for (int c = 0; c < 4; ++c) {
      for (int i = 0; i < 4; ++i) {
        chunks[64 * c + 4 * r + i] = static_cast<uint8_t>((q[4 * c + i] & 0xF) | (q[16 + 4 * c + i] & 0xF) << 4);
      }
    }
    if constexpr (B > 0) {
      for (int i = 0; i < 4; ++i) {
        uint32_t bits = 0;  // bit p = B * (4h + c) on: quant 16h + 4c + i's high bits
        for (int h = 0; h < 2; ++h) {
          for (int c = 0; c < 4; ++c) bits |= static_cast<uint32_t>(q[16 * h + 4 * c + i] >> 4) << B * (4 * h + c);
        }
        for (int reg = 0; reg < B; ++reg) chunks[256 + 64 * reg + 4 * r + i] = static_cast<uint8_t>(bits >> 8 * reg);
      }
    }
  }
}

// Q4_K and Q5_K: the same head; sub-block j's quant e is the low (j even) or high (j odd) nibble of
// qs[32 * (j / 2) + e % 32], and Q5_K's fifth bit is bit j of qh[e % 32].
template <class Block>
void PackBlockQ45_K(const uint8_t* const* rows, uint8_t* out) {
  constexpr int B = std::is_same_v<Block, BlockQ5_K> ? 1 : 0;
  auto* d = reinterpret_cast<f16_t*>(out);
  f16_t* dmin = d + 16;
  uint8_t* sc = out + 64;
  uint8_t* m = sc + 128;
  for (int r = 0; r < kPackRows; ++r) {
    const auto* b = reinterpret_cast<const Block*>(rows[r]);
    d[r] = b->d;
    dmin[r] = b->dmin;
    uint8_t q[256];
    for (int j = 0; j < 8; ++j) {
      int scale, min;
      KScaleMin(b->scales, j, &scale, &min);
      sc[16 * j + r] = static_cast<uint8_t>(scale);
      m[32 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(min);
      for (int l = 0; l < 32; ++l) {
        q[32 * j + l] = static_cast<uint8_t>((b->qs[32 * (j / 2) + l] >> 4 * (j % 2)) & 0xF);
        if constexpr (B == 1) q[32 * j + l] |= static_cast<uint8_t>(((b->qh[l] >> j) & 1) << 4);
      }
    }
    PackKRow<B>(q, r, out + kKHeadBytes);
  }
}

// Q6_K: quant e = 128h + 32k + l takes its low 4 bits from ql[64h + 32(k & 1) + l] (the high nibble when k >= 2)
// and its top two from qh[32h + l] at bit 2k.
void PackBlockQ6_K(const uint8_t* const* rows, uint8_t* out) {
  auto* d = reinterpret_cast<f16_t*>(out);
  std::memset(out + 32, 0, 32);  // the padding
  auto* sc = reinterpret_cast<int8_t*>(out + 64);
  for (int r = 0; r < kPackRows; ++r) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(rows[r]);
    d[r] = b->d;
    for (int j = 0; j < 16; ++j) sc[16 * j + r] = b->scales[j];
    uint8_t q[256];
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < 32; ++l) {
          const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (k >= 2 ? 4 : 0)) & 0xF;
          q[128 * h + 32 * k + l] = static_cast<uint8_t>(lo | ((b->qh[32 * h + l] >> 2 * k) & 3) << 4);
        }
      }
    }
    PackKRow<2>(q, r, out + kKHeadBytes);
  }
}

using PackBlockFn = void (*)(const uint8_t* const* rows, uint8_t* out);

PackBlockFn PackBlockFor(DType type) {
  switch (type) {
    case DType::kQ4_0: return PackBlockQ4_0;
    case DType::kQ8_0: return PackBlockQ8_0;
    case DType::kMXFP4: return PackBlockMXFP4;
    case DType::kQ4_K: return PackBlockQ45_K<BlockQ4_K>;
    case DType::kQ5_K: return PackBlockQ45_K<BlockQ5_K>;
    case DType::kQ6_K: return PackBlockQ6_K;
    default: return nullptr;
  }
}

}  // namespace

int32_t Block32Offset(DType type) {
  if (type == DType::kQ4_0) return 8;
  if (type == DType::kQ8_0) return 128;
  TANDEM_CHECK(type == DType::kMXFP4);
  return kMxfp4Offset;
}

PackedActUnit PackedActUnitOf(DType wtype, int capacity) {
  TANDEM_CHECK(capacity == 1 || capacity == kPackedTokTile);
  const int64_t q = IsPackedKQuant(wtype) ? 256 : 32;
  const size_t aux = wtype == DType::kQ6_K ? 64 : IsPackedKQuant(wtype) ? 16 : 4;
  const auto cap = static_cast<size_t>(capacity);
  const size_t d_offset = cap * static_cast<size_t>(q);
  const size_t aux_offset = d_offset + cap * sizeof(float);
  return {q, d_offset, aux_offset, aux, aux_offset + cap * aux};
}

size_t PackedActTileBytes(DType wtype, int64_t n, int capacity) {
  const PackedActUnit u = PackedActUnitOf(wtype, capacity);
  return static_cast<size_t>(n / u.quants) * u.bytes;
}

void QuantizePackedAct(DType wtype, const float* x, int64_t n, uint8_t* tile, int capacity, int slot, Isa isa) {
  const PackedActUnit u = PackedActUnitOf(wtype, capacity);
  if (!IsPackedKQuant(wtype) && isa >= Isa::kAvx2) {
    // One pass over the row, writing each block's quants, scale and sum where the kernels read them; per block
    // through ConvertActivationRow, a one-token down projection's 448 blocks took about 10 us a thread.
    Avx2QuantizeQ8_0Strided(x, n, Block32Offset(wtype),
                            Q8_0Strided{.qs = tile + slot * u.quants,
                                        .d = tile + u.d_offset + slot * sizeof(float),
                                        .aux = tile + u.aux_offset + slot * u.aux_bytes, .stride = u.bytes});
    return;
  }
  for (int64_t b = 0; b < n / u.quants; ++b) {
    uint8_t* unit = tile + static_cast<size_t>(b) * u.bytes;
    auto* qs = reinterpret_cast<int8_t*>(unit + slot * u.quants);
    auto* d = reinterpret_cast<float*>(unit + u.d_offset) + slot;
    auto* aux = reinterpret_cast<int32_t*>(unit + u.aux_offset + slot * u.aux_bytes);
    if (IsPackedKQuant(wtype)) {
      BlockQ8_K blk;
      if (isa < Isa::kAvx2 || !Avx2QuantizeActivationRow(DType::kQ8_K, x + 256 * b, &blk, 256)) {
        QuantizeRowQ8_K(x + 256 * b, &blk, 256);
      }
      std::memcpy(qs, blk.qs, 256);
      *d = blk.d;
      if (wtype == DType::kQ6_K) {
        for (int j = 0; j < 16; ++j) aux[j] = -32 * blk.bsums[j];
      } else {
        int16_t sums[8];
        for (int j = 0; j < 8; ++j) sums[j] = static_cast<int16_t>(blk.bsums[2 * j] + blk.bsums[2 * j + 1]);
        std::memcpy(aux, sums, sizeof(sums));
      }
      continue;
    }
    // One block through the vec_dot.h Q8_0 conversion: 32 quants, then the widened scale (and an unused s).
    struct {
      int8_t qs[32];
      float d, s;
    } blk;
    static_assert(sizeof(blk) == 40);
    ConvertActivationRow(DType::kQ8_0, x + 32 * b, &blk, 32, isa);
    std::memcpy(qs, blk.qs, 32);
    *d = blk.d;
    int sum = 0;
    for (int k = 0; k < 32; ++k) sum += blk.qs[k];
    *aux = -Block32Offset(wtype) * sum;
  }
}

}  // namespace internal

bool CanRepack(const WeightMatrix& w) {
  return !IsPacked(w) && internal::PackedBlockBytes(w.type) > 0 && w.rows % kPackRows == 0 && w.rows > 0 &&
         w.cols % Traits(w.type).block_elems == 0;
}

size_t PackedBytes(const WeightMatrix& w) {
  TANDEM_CHECK(CanRepack(w));
  const int64_t nb = w.cols / Traits(w.type).block_elems;
  return static_cast<size_t>(w.rows / kPackRows) * static_cast<size_t>(nb) * internal::PackedBlockBytes(w.type);
}

WeightMatrix Repack(const WeightMatrix& w, void* dst) {
  TANDEM_CHECK(CanRepack(w));
  const internal::PackBlockFn pack = internal::PackBlockFor(w.type);
  const size_t block_bytes = Traits(w.type).block_bytes;
  const size_t packed_block = internal::PackedBlockBytes(w.type);
  const int64_t nb = w.cols / Traits(w.type).block_elems;
  const size_t stride = w.row_stride == 0 ? RowBytes(w.type, w.cols) : w.row_stride;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t n_groups = w.rows / kPackRows;
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* rows[kPackRows];
    for (int64_t b = 0; b < nb; ++b) {
      for (int r = 0; r < kPackRows; ++r) {
        rows[r] = src + static_cast<size_t>(g * kPackRows + r) * stride + static_cast<size_t>(b) * block_bytes;
      }
      pack(rows, out + (static_cast<size_t>(g) * static_cast<size_t>(nb) + static_cast<size_t>(b)) * packed_block);
    }
  }
  WeightMatrix packed = w;
  packed.data = dst;
  packed.row_stride = 0;
  packed.layout = kPackedLayout;
  return packed;
}

}  // namespace tandem::cpu
