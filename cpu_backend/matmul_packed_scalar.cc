// Portable kernels over the packed layout (repack.h): the reference the VNNI kernels are held to, and the path
// for a CPU without AVX-512 when the weights were packed anyway. Integer sums are exact, as in the fast kernels.
#include <cstring>

#include "cpu_backend/repack.h"

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

// Q4_0 and Q8_0: per block, sum over k of the unsigned packed quant times the activation, from aux.
template <bool kNibbles>
void PackedBlock32(const uint8_t* group, int64_t nb, const uint8_t* tile, int capacity, int n_x, float* y,
                   size_t y_stride) {
  const TileView a{tile, PackedActUnitOf(kNibbles ? DType::kQ4_0 : DType::kQ8_0, capacity)};
  const size_t block_bytes = kNibbles ? 288 : 544;
  for (int t = 0; t < n_x; ++t) {
    float acc[kPackRows] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = group + b * block_bytes;
      const auto* d = reinterpret_cast<const f16_t*>(blk);
      const uint8_t* qs = blk + 32;
      const int8_t* xq = a.qs(b, t);
      for (int r = 0; r < kPackRows; ++r) {
        int32_t sum = *a.aux(b, t);
        for (int k = 0; k < 32; ++k) {
          int q;
          if (kNibbles) {
            const uint8_t byte = qs[64 * ((k % 16) / 4) + 4 * r + k % 4];
            q = k < 16 ? (byte & 0xF) : (byte >> 4);
          } else {
            q = qs[64 * (k / 4) + 4 * r + k % 4];
          }
          sum += q * xq[k];
        }
        acc[r] += static_cast<float>(sum) * (F16ToF32(d[r]) * a.d(b, t));
      }
    }
    std::memcpy(y + t * y_stride, acc, sizeof(acc));
  }
}

void PackedQ4_K(const uint8_t* group, int64_t nb, const uint8_t* tile, int capacity, int n_x, float* y,
                size_t y_stride) {
  const TileView a{tile, PackedActUnitOf(DType::kQ4_K, capacity)};
  for (int t = 0; t < n_x; ++t) {
    float acc[kPackRows] = {};
    for (int64_t s = 0; s < nb; ++s) {
      const uint8_t* blk = group + s * 2368;
      const auto* d = reinterpret_cast<const f16_t*>(blk);
      const f16_t* dmin = d + 16;
      const uint8_t* sc = blk + 64;
      const uint8_t* m = sc + 128;
      const uint8_t* qs = m + 128;
      const int8_t* xq = a.qs(s, t);
      int16_t bsum32[8];
      std::memcpy(bsum32, a.aux(s, t), sizeof(bsum32));
      const float da = a.d(s, t);
      for (int r = 0; r < kPackRows; ++r) {
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
          int32_t sub = 0;
          for (int k = 0; k < 32; ++k) {
            const uint8_t byte = qs[256 * j + 64 * ((k % 16) / 4) + 4 * r + k % 4];
            sub += (k < 16 ? (byte & 0xF) : (byte >> 4)) * xq[32 * j + k];
          }
          isum += sc[16 * j + r] * sub;
          msum += m[32 * (j / 2) + 2 * r + j % 2] * bsum32[j];
        }
        // The scale products first, then each integer sum against its own (the order llama.cpp rounds in).
        acc[r] += F16ToF32(d[r]) * da * static_cast<float>(isum);
        acc[r] -= F16ToF32(dmin[r]) * da * static_cast<float>(msum);
      }
    }
    std::memcpy(y + t * y_stride, acc, sizeof(acc));
  }
}

}  // namespace

PackedKernelFn ScalarPackedKernel(DType wtype) {
  switch (wtype) {
    case DType::kQ4_0: return PackedBlock32<true>;
    case DType::kQ8_0: return PackedBlock32<false>;
    case DType::kQ4_K: return PackedQ4_K;
    default: return nullptr;
  }
}

}  // namespace tandem::cpu::internal
