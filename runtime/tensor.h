// Views of the tensors the backends compute with: weight matrices and one layer's KV cache. Plain structs of
// pointers and sizes, compiled by nvcc (C++17) as well as by the host compiler.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tandem {

// How a matrix's bytes are laid out. kGgufLayout is the file's own: row r starts at data + r * row_stride, in
// `type` blocks. Any other value is a backend's private layout (Backend::PrepareMatMulWeights made it): only that
// backend reads it, and only that backend frees it.
using WeightLayout = uint32_t;
inline constexpr WeightLayout kGgufLayout = 0;

// A weight matrix: `rows` output rows of `cols` input elements each (ggml's ne0 = cols, ne1 = rows).
struct WeightMatrix {
  DType type = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;        // outputs
  int64_t cols = 0;        // inputs (contiguous)
  size_t row_stride = 0;   // bytes between rows in the GGUF layout (RowBytes(type, cols) for a whole tensor)
  WeightLayout layout = kGgufLayout;

  // An optional tensor the file lacks is an empty matrix.
  bool present() const { return rows > 0; }
  // Bytes of the rows in the GGUF layout (what a copy to another device moves).
  size_t bytes() const { return static_cast<size_t>(rows) * row_stride; }
};

// One layer's cache: K and V each [n_ctx][row_elems] in F32 or F16, row_elems = n_head_kv * head_dim. Position p
// sits at row p, or, in a ring (a sliding-window layer's cache, which keeps only the rows a window still sees),
// at row p % n_ctx: a batch of n tokens under a window w needs n_ctx >= w + n - 1, so that every row its queries
// read is still there after its own keys are stored.
struct KvLayer {
  DType type = DType::kF16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_ctx = 0;      // rows
  int64_t row_elems = 0;
  bool ring = false;

  int64_t Row(int64_t pos) const { return ring ? pos % n_ctx : pos; }
  // Whether n_tok new rows from position pos0 fit (KvStore), and whether their queries, each seeing `window` keys
  // (0: every earlier one), find all of them still here (Attention).
  bool HoldsStore(int64_t pos0, int64_t n_tok) const {
    return pos0 >= 0 && n_tok >= 0 && (ring ? n_tok <= n_ctx : pos0 + n_tok <= n_ctx);
  }
  bool HoldsAttention(int64_t pos0, int64_t n_tok, int window) const {
    return HoldsStore(pos0, n_tok) && (!ring || (window > 0 && window + n_tok - 1 <= n_ctx));
  }
  // Rows from position `pos` on before the ring wraps to row 0 (all the rest without a ring).
  int64_t RowsBeforeWrap(int64_t pos) const { return ring ? n_ctx - pos % n_ctx : n_ctx - pos; }
};

}  // namespace tandem
