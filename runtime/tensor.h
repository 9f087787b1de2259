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

// One layer's cache: K and V each [n_ctx][row_elems] in F32 or F16, row_elems = n_head_kv * head_dim.
struct KvLayer {
  DType type = DType::kF16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_ctx = 0;
  int64_t row_elems = 0;
};

}  // namespace tandem
