// Naive MatMul reference: float weights from the core dequantizers, activations rounded through the same
// vec-dot type the fast path uses (so both see identical operands), products summed in double.
#include <algorithm>
#include <vector>

#include "core/quant.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {

void MatMulRef(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) {
  const DType vdt = VecDotType(w.type);
  const size_t w_stride = w.row_stride == 0 ? RowBytes(w.type, w.cols) : w.row_stride;
  const auto n = static_cast<size_t>(w.cols);

  // x as the kernels see it: through the core quantizer of the vec-dot type and dequantized back.
  std::vector<float> xr(n * static_cast<size_t>(n_tok));
  std::vector<uint8_t> packed(vdt == DType::kF32 ? 0 : RowBytes(vdt, w.cols));
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* src = x + t * n;
    float* dst = xr.data() + t * n;
    switch (vdt) {
      case DType::kF32: std::copy(src, src + n, dst); continue;
      case DType::kF16: {
        auto* h = reinterpret_cast<f16_t*>(packed.data());
        for (size_t i = 0; i < n; ++i) h[i] = F32ToF16(src[i]);
        break;
      }
      case DType::kBF16: {
        auto* h = reinterpret_cast<bf16_t*>(packed.data());
        for (size_t i = 0; i < n; ++i) h[i] = F32ToBf16(src[i]);
        break;
      }
      case DType::kQ8_0: QuantizeRowQ8_0(src, reinterpret_cast<BlockQ8_0*>(packed.data()), w.cols); break;
      case DType::kQ8_1: QuantizeRowQ8_1(src, reinterpret_cast<BlockQ8_1*>(packed.data()), w.cols); break;
      case DType::kQ8_K: QuantizeRowQ8_K(src, reinterpret_cast<BlockQ8_K*>(packed.data()), w.cols); break;
      default: TANDEM_CHECK(false && "no such vec-dot type");
    }
    DequantizeRow(vdt, packed.data(), dst, w.cols);
  }

  std::vector<float> wr(n);
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, static_cast<const uint8_t*>(w.data) + r * w_stride, wr.data(), w.cols);
    for (int64_t t = 0; t < n_tok; ++t) {
      const float* xt = xr.data() + t * n;
      double s = 0.0;
      for (size_t i = 0; i < n; ++i) s += static_cast<double>(wr[i]) * xt[i];
      y[t * w.rows + r] = static_cast<float>(s);
    }
  }
}

}  // namespace tandem::cpu
