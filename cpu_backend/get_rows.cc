// Embedding lookup: each token's row of the table, dequantized to float.
#include "core/quant.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"

namespace tandem::cpu {

void GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y) {
  const auto* base = static_cast<const uint8_t*>(table.data);
  // Rows are independent; only large batches are worth a thread team.
#pragma omp parallel for schedule(static) if (n_tok * table.cols >= (1 << 16))
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t id = ids[t];
    TANDEM_CHECK(id >= 0 && id < table.rows);  // callers validate token ids; this guards the invariant
    DequantizeRow(table.type, base + static_cast<size_t>(id) * table.row_stride, y + t * table.cols, table.cols);
  }
}

}  // namespace tandem::cpu
