// Packed quantized rows back to values (layouts: repack.h). The reference reads the packed bytes one quant at a
// time, in the same float operations as core/quant.cc's dequantizers, so that its values equal theirs bit for bit.
#include "cpu_backend/packed_dequant.h"

#include "core/status.h"
#include "cpu_backend/repack.h"

namespace tandem::cpu {
namespace internal {
namespace {

// A packed block of 32 (Q4_0, Q8_0, MXFP4): v[r][e] for its 16 rows.
void RefBlock32(DType type, const uint8_t* blk, float (*v)[32]) {
  const uint8_t* qs = blk + Block32QuantsAt(type);
  for (int r = 0; r < kPackRows; ++r) {
    if (type == DType::kQ8_0) {
      const float d = F16ToF32(reinterpret_cast<const f16_t*>(blk)[r]);
      for (int j = 0; j < 8; ++j) {
        for (int i = 0; i < 4; ++i) {
          v[r][4 * j + i] = d * static_cast<float>(static_cast<int8_t>(qs[64 * j + 4 * r + i] ^ 0x80));
        }
      }
      continue;
    }
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        const uint8_t byte = qs[64 * j + 4 * r + i];
        const int lo = byte & 0xF, hi = byte >> 4, e = 4 * j + i;
        if (type == DType::kQ4_0) {
          const float d = F16ToF32(reinterpret_cast<const f16_t*>(blk)[r]);
          v[r][e] = d * static_cast<float>(lo - 8);
          v[r][16 + e] = d * static_cast<float>(hi - 8);
        } else {  // MXFP4
          const float d = E8M0HalfToF32(blk[r]);
          v[r][e] = static_cast<float>(kMxfp4Values[lo]) * d;
          v[r][16 + e] = static_cast<float>(kMxfp4Values[hi]) * d;
        }
      }
    }
  }
}

// Row r's 256 quants of a packed K-quant super-block (0..15, 0..31 or 0..63), from its chunks.
void UnpackKRow(DType type, const uint8_t* chunks, int r, uint8_t* q) {
  const int b = KHighBits(type);
  for (int k = 0; k < 8; ++k, q += 32, chunks += KChunkBytes(type)) {
    for (int c = 0; c < 4; ++c) {
      for (int i = 0; i < 4; ++i) {
        const uint8_t byte = chunks[64 * c + 4 * r + i];
        q[4 * c + i] = byte & 0xF;
        q[16 + 4 * c + i] = byte >> 4;
      }
    }
    for (int i = 0; b > 0 && i < 4; ++i) {
      uint32_t bits = 0;
      for (int reg = 0; reg < b; ++reg) bits |= static_cast<uint32_t>(chunks[256 + 64 * reg + 4 * r + i]) << 8 * reg;
      for (int h = 0; h < 2; ++h) {
        for (int c = 0; c < 4; ++c) {
          const uint32_t high = (bits >> b * (4 * h + c)) & ((1u << b) - 1);
          q[16 * h + 4 * c + i] = static_cast<uint8_t>(q[16 * h + 4 * c + i] | high << 4);
        }
      }
    }
  }
}

// A packed K-quant super-block: v[r][e] for its 16 rows.
void RefBlockK(DType type, const uint8_t* blk, float (*v)[256]) {
  const auto* d = reinterpret_cast<const f16_t*>(blk);
  for (int r = 0; r < kPackRows; ++r) {
    uint8_t q[256];
    UnpackKRow(type, blk + kKHeadBytes, r, q);
    const float dr = F16ToF32(d[r]);
    if (type == DType::kQ6_K) {
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 64);
      for (int e = 0; e < 256; ++e) {
        v[r][e] = dr * static_cast<float>(sc[16 * (e / 16) + r]) * static_cast<float>(q[e] - 32);
      }
      continue;
    }
    const float dmin = F16ToF32(d[16 + r]);
    for (int j = 0; j < 8; ++j) {
      const float dk = dr * static_cast<float>(blk[64 + 16 * j + r]);
      const float mk = dmin * static_cast<float>(blk[192 + 32 * (j / 2) + 2 * r + j % 2]);
      for (int e = 32 * j; e < 32 * j + 32; ++e) v[r][e] = dk * static_cast<float>(q[e]) - mk;
    }
  }
}

// Every value of groups g0..g0 + n_groups, as put(column, row within the groups, value).
template <typename Put>
void ForEachValue(const WeightMatrix& w, int64_t g0, int64_t n_groups, Put put) {
  const int64_t be = Traits(w.type).block_elems, nb = w.cols / be;
  const size_t block_bytes = PackedBlockBytes(w.type);
  float v[kPackRows * 256];
  for (int64_t g = 0; g < n_groups; ++g) {
    const auto* group = static_cast<const uint8_t*>(w.data) + static_cast<size_t>((g0 + g) * nb) * block_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = group + static_cast<size_t>(b) * block_bytes;
      if (IsPackedKQuant(w.type)) {
        RefBlockK(w.type, blk, reinterpret_cast<float(*)[256]>(v));
      } else {
        RefBlock32(w.type, blk, reinterpret_cast<float(*)[32]>(v));
      }
      for (int r = 0; r < kPackRows; ++r) {
        for (int64_t e = 0; e < be; ++e) put(b * be + e, kPackRows * g + r, v[r * be + e]);
      }
    }
  }
}

}  // namespace

void DequantizePackedRef(const WeightMatrix& w, int64_t g0, int64_t n_groups, float* out, int64_t ld) {
  TANDEM_CHECK(CanDequantizePacked(w) && ld >= kPackRows * n_groups);
  ForEachValue(w, g0, n_groups, [&](int64_t c, int64_t r, float v) { out[c * ld + r] = v; });
}

}  // namespace internal

bool CanDequantizePacked(const WeightMatrix& w) {
  return IsPacked(w) && internal::PackedBlockBytes(w.type) > 0 && w.rows % kPackRows == 0;
}

void DequantizePacked(const WeightMatrix& w, int64_t g0, int64_t n_groups, bf16_t* out, int64_t ld) {
  if (ActiveIsa() == Isa::kAvx512) return internal::Avx512DequantizePacked(w, g0, n_groups, out, ld);
  TANDEM_CHECK(CanDequantizePacked(w) && ld >= kPackRows * n_groups);
  internal::ForEachValue(w, g0, n_groups, [&](int64_t c, int64_t r, float v) { out[c * ld + r] = F32ToBf16(v); });
}

}  // namespace tandem::cpu
