// Appends K and V rows to one layer's cache, converting to the cache's element type.
#include <cstring>

#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {
namespace {

void StoreRows(DType type, void* cache, const float* src, int64_t n_tok, int64_t pos0, int64_t row_elems) {
  if (type == DType::kF32) {
    std::memcpy(static_cast<float*>(cache) + pos0 * row_elems, src,
                static_cast<size_t>(n_tok * row_elems) * sizeof(float));
    return;
  }
  f16_t* dst = static_cast<f16_t*>(cache) + pos0 * row_elems;
  const int64_t n = n_tok * row_elems;
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToF16(src[i]);
}

}  // namespace

void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) {
  TANDEM_CHECK(kv.type == DType::kF32 || kv.type == DType::kF16);
  TANDEM_CHECK(pos0 >= 0 && n_tok >= 0 && pos0 + n_tok <= kv.n_ctx);
  StoreRows(kv.type, kv.k, k, n_tok, pos0, kv.row_elems);
  StoreRows(kv.type, kv.v, v, n_tok, pos0, kv.row_elems);
}

}  // namespace tandem::cpu
