// Internal helpers shared by the SIMD dot-product files (vec_dot_avx2.cc, vec_dot_avx512.cc).
//
// Everything here sits in an unnamed namespace on purpose: each ISA file is compiled with different -m flags,
// and an ordinary inline function would be merged across them by the linker, so a copy built with AVX-512 could
// end up called from code that must run without it.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu_backend/vec_dot.h"

namespace tandem::cpu::internal {
namespace {

// Q4_K/Q5_K packed scales: 8 six-bit scales and 8 six-bit mins in 12 bytes (see core/quant.cc). Bytes 0..3 hold
// scales 0..3 and 4..7 mins 0..3 in their low 6 bits; bytes 8..11 hold the low nibbles of scale (low) and min
// (high) 4..7, whose top 2 bits sit in the top bits of bytes 0..3 (scales) and 4..7 (mins).
inline void UnpackKScales(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  uint32_t a, b, c;
  std::memcpy(&a, packed, 4);
  std::memcpy(&b, packed + 4, 4);
  std::memcpy(&c, packed + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu;
  const uint32_t m_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  std::memcpy(scales, &sc_lo, 4);
  std::memcpy(scales + 4, &sc_hi, 4);
  std::memcpy(mins, &m_lo, 4);
  std::memcpy(mins + 4, &m_hi, 4);
}

// Calls K::Run<NX> for the token count of this call, so kernels keep per-token state in registers.
template <class K>
void DispatchTokens(int64_t n, const void* w, const void* x, size_t x_stride, int n_x, float* out,
                    size_t out_stride) {
  switch (n_x) {
    case 1: K::template Run<1>(n, w, x, x_stride, out, out_stride); return;
    case 2: K::template Run<2>(n, w, x, x_stride, out, out_stride); return;
    case 3: K::template Run<3>(n, w, x, x_stride, out, out_stride); return;
    default: K::template Run<4>(n, w, x, x_stride, out, out_stride); return;
  }
}
static_assert(kTokTile == 4, "DispatchTokens covers 1..4 tokens");

}  // namespace
}  // namespace tandem::cpu::internal
