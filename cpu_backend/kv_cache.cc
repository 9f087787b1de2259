// Appends K and V rows to one layer's cache, converting to the cache's element type. A ring cache (runtime/
// tensor.h) takes a batch in at most two runs: up to its last row, then from row 0.
#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {
namespace {

void StoreRun(DType type, void* cache, const float* src, int64_t n_tok, int64_t row0, int64_t row_elems) {
  if (type == DType::kF32) {
    std::memcpy(static_cast<float*>(cache) + row0 * row_elems, src,
                static_cast<size_t>(n_tok * row_elems) * sizeof(float));
    return;
  }
  f16_t* dst = static_cast<f16_t*>(cache) + row0 * row_elems;
  const int64_t n = n_tok * row_elems;
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToF16(src[i]);
}

void StoreRows(const KvLayer& kv, void* cache, const float* src, int64_t n_tok, int64_t pos0) {
  for (int64_t done = 0; done < n_tok;) {
    const int64_t pos = pos0 + done;
    const int64_t run = std::min(n_tok - done, kv.RowsBeforeWrap(pos));
    StoreRun(kv.type, cache, src + done * kv.row_elems, run, kv.Row(pos), kv.row_elems);
    done += run;
  }
}

}  // namespace

void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) {
  TANDEM_CHECK(kv.type == DType::kF32 || kv.type == DType::kF16);
  TANDEM_CHECK(kv.HoldsStore(pos0, n_tok));
  StoreRows(kv, kv.k, k, n_tok, pos0);
  StoreRows(kv, kv.v, v, n_tok, pos0);
}

}  // namespace tandem::cpu
