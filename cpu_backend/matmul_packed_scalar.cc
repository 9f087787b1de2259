// Portable kernels over the packed layout (repack.h): the reference the VNNI kernels are held to, and the path
// for a CPU without AVX-512 when the weights were packed anyway. Integer sums are exact, as in the fast kernels.
#include <cstring>

#include "cpu_backend/repack.h"
#include "cpu_backend/vec_dot.h"

namespace tandem::cpu::internal {
namespace {

// Token t's quants, scale and aux words in unit b of a tile (repack.h).
struct TileView {
  const uint8_t* tile;
  PackedActUnit u;
  const uint8_t* unit(int64_t b) const { return tile + static_cast<size_t>(b) * u.bytes; }
  const int8_t* qs(int64_t b, int t) const { return reinterpret_cast<const int8_t*>(unit(b) + t * u.quants); }
  float d(int64_t b, int t) const { return reinterpret_cast<const float*>(unit(b) + u.d_offset)[t]; }
  const int32_t* aux(int64_t b, int t) const {
    return reinterpret_cast<const int32_t*>(unit(b) + u.aux_offset + t * u.aux_bytes);
  }
};

// Q4_0, Q8_0 and MXFP4: per block, sum over k of the unsigned packed quant (MXFP4's through kMxfp4Lut) times the
// activation, from aux.
template <DType kType>
void PackedBlock32(const uint8_t* group, int64_t nb, const uint8_t* tile, int capacity, int n_x, float* y,
                   size_t y_stride) {
  constexpr bool kNibbles = kType != DType::kQ8_0;
  const TileView a{tile, PackedActUnitOf(kType, capacity)};
  const size_t block_bytes = Block32Bytes(kType);
  for (int t = 0; t < n_x; ++t) {
    float acc[kPackRows] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = group + b * block_bytes;
      const uint8_t* qs = blk + Block32QuantsAt(kType);
      const int8_t* xq = a.qs(b, t);
      for (int r = 0; r < kPackRows; ++r) {
        int32_t sum = *a.aux(b, t);
        for (int k = 0; k < 32; ++k) {
          int q;
          if (kNibbles) {
            const uint8_t byte = qs[64 * ((k % 16) / 4) + 4 * r + k % 4];
            q = k < 16 ? (byte & 0xF) : (byte >> 4);
            if constexpr (kType == DType::kMXFP4) q = kMxfp4Lut.v[q];
          } else {
            q = qs[64 * (k / 4) + 4 * r + k % 4];
          }
          sum += q * xq[k];
        }
        const float dw = kType == DType::kMXFP4 ? E8M0HalfToF32(blk[r])
                                                : F16ToF32(reinterpret_cast<const f16_t*>(blk)[r]);
        acc[r] += static_cast<float>(sum) * (dw * a.d(b, t));
      }
    }
    std::memcpy(y + t * y_stride, acc, sizeof(acc));
  }
}

// Row r's quant e (0..255) of a packed K-quant super-block: its low 4 bits and B high bits (repack.h).
template <int B>
int KQuant(const uint8_t* chunks, int r, int e) {
  const uint8_t* chunk = chunks + static_cast<size_t>(e / 32) * (256 + 64 * B);
  const int h = (e % 32) / 16, c = (e % 16) / 4, i = e % 4;
  int q = (chunk[64 * c + 4 * r + i] >> 4 * h) & 0xF;
  if constexpr (B > 0) {
    const int p = B * (4 * h + c);
    q |= ((chunk[256 + 64 * (p / 8) + 4 * r + i] >> p % 8) & ((1 << B) - 1)) << 4;
  }
  return q;
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with a scale and a min; Q6_K: 16 sub-blocks of 16 with a signed scale and
// values q - 32, each sub-block's sum starting from the activations' -32 * sum (aux).
template <DType kType>
void PackedK(const uint8_t* group, int64_t nb, const uint8_t* tile, int capacity, int n_x, float* y,
             size_t y_stride) {
  constexpr int B = KHighBits(kType);
  constexpr bool kMins = kType != DType::kQ6_K;
  constexpr int kSub = kMins ? 32 : 16;
  const TileView a{tile, PackedActUnitOf(kType, capacity)};
  for (int t = 0; t < n_x; ++t) {
    float acc[kPackRows] = {};
    for (int64_t s = 0; s < nb; ++s) {
      const uint8_t* blk = group + s * PackedBlockBytes(kType);
      const auto* d = reinterpret_cast<const f16_t*>(blk);
      const f16_t* dmin = d + 16;
      const uint8_t* sc = blk + 64;
      const uint8_t* m = sc + 128;
      const int8_t* xq = a.qs(s, t);
      int16_t bsum32[8];
      if constexpr (kMins) std::memcpy(bsum32, a.aux(s, t), sizeof(bsum32));
      const float da = a.d(s, t);
      for (int r = 0; r < kPackRows; ++r) {
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 256 / kSub; ++j) {
          int32_t sub = kMins ? 0 : a.aux(s, t)[j];
          for (int k = kSub * j; k < kSub * (j + 1); ++k) sub += KQuant<B>(blk + kKHeadBytes, r, k) * xq[k];
          if constexpr (kMins) {
            isum += sc[16 * j + r] * sub;
            msum += m[32 * (j / 2) + 2 * r + j % 2] * bsum32[j];
          } else {
            isum += static_cast<int8_t>(sc[16 * j + r]) * sub;
          }
        }
        // The scale products first, then each integer sum against its own (the order llama.cpp rounds in).
        acc[r] += F16ToF32(d[r]) * da * static_cast<float>(isum);
        if constexpr (kMins) acc[r] -= F16ToF32(dmin[r]) * da * static_cast<float>(msum);
      }
    }
    std::memcpy(y + t * y_stride, acc, sizeof(acc));
  }
}

}  // namespace

PackedKernelFn ScalarPackedKernel(DType wtype) {
  switch (wtype) {
    case DType::kQ4_0: return PackedBlock32<DType::kQ4_0>;
    case DType::kQ8_0: return PackedBlock32<DType::kQ8_0>;
    case DType::kMXFP4: return PackedBlock32<DType::kMXFP4>;
    case DType::kQ4_K: return PackedK<DType::kQ4_K>;
    case DType::kQ5_K: return PackedK<DType::kQ5_K>;
    case DType::kQ6_K: return PackedK<DType::kQ6_K>;
    default: return nullptr;
  }
}

}  // namespace tandem::cpu::internal
