// OneDnnMatMuls: a cache of oneDNN matmul primitives by weight shape, made at plan time. oneDNN reports errors
// by exception (dnnl::error); they become absl::Status here and go no further.
#include "cpu_backend/onednn_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/vec_dot.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace tandem::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct ShapeKey {
  DType type;
  int64_t rows, cols;
  size_t row_stride;
  bool operator==(const ShapeKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const ShapeKey& k) {
    return H::combine(std::move(h), k.type, k.rows, k.cols, k.row_stride);
  }
};

ShapeKey KeyOf(const WeightMatrix& w) {
  const size_t row_bytes = RowBytes(w.type, w.cols);
  return {w.type, w.rows, w.cols, w.row_stride == 0 ? row_bytes : w.row_stride};
}

memory::data_type DataTypeOf(DType t) { return t == DType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32; }

absl::Status FromDnnl(const dnnl::error& e, std::string_view what) {
  return absl::InternalError(Cat("oneDNN ", what, ": ", e.what(), " (status ", static_cast<int>(e.status), ")"));
}

// Activations in the weight type's vec-dot type: bf16 rows for BF16; F32 reads x in place.
size_t ActBytes(DType type, int64_t n_tok, int64_t cols) {
  return type == DType::kBF16 ? AlignUp(sizeof(bf16_t) * static_cast<size_t>(n_tok * cols)) : 0;
}

struct Shape {
  memory::desc weights;             // [cols, rows] over the file's rows
  dnnl::matmul fixed, any;          // batches of max_tokens; of any size (runtime M)
  bool has_fixed = false;
  size_t fixed_scratch = 0, any_scratch = 0;
  std::string fixed_impl, any_impl;
};

}  // namespace

bool OneDnnEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("TANDEM_ONEDNN");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

bool OneDnnTakesType(DType type) { return type == DType::kF32 || type == DType::kBF16; }

struct OneDnnMatMuls::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  int64_t max_tokens = 0;
  absl::flat_hash_map<ShapeKey, Shape> shapes;

  // A matmul of m tokens (DNNL_RUNTIME_DIM_VAL: any) for the shape, with a user scratchpad.
  dnnl::matmul::primitive_desc Desc(const ShapeKey& k, const memory::desc& weights, int64_t m) const {
    const memory::desc src({m, k.cols}, DataTypeOf(k.type), Tag::ab);
    const memory::desc dst({m, k.rows}, memory::data_type::f32, Tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), attr, engine);
  }

  void MakeFixed(const ShapeKey& k, Shape& s) const {
    if (max_tokens <= kOneDnnMaxDecodeTokens) return;
    const auto pd = Desc(k, s.weights, max_tokens);
    s.fixed = dnnl::matmul(pd);
    s.has_fixed = true;
    s.fixed_scratch = pd.scratchpad_desc().get_size();
    s.fixed_impl = pd.impl_info_str();
  }
};

OneDnnMatMuls::OneDnnMatMuls() : impl_(std::make_unique<Impl>()) {}
OneDnnMatMuls::~OneDnnMatMuls() = default;

absl::StatusOr<bool> OneDnnMatMuls::Prepare(const WeightMatrix& w) {
  if (!OneDnnTakesType(w.type) || w.layout != kGgufLayout || w.rows < kOneDnnMinRows || w.cols == 0) return false;
  const ShapeKey k = KeyOf(w);
  if (impl_->shapes.contains(k)) return true;
  try {
    Shape s;
    const auto elem = static_cast<int64_t>(Traits(w.type).block_bytes);
    if (static_cast<int64_t>(k.row_stride) % elem != 0) return false;
    // W[r][c] at r * stride + c: element (c, r) of a [cols, rows] matrix with strides (1, stride).
    s.weights = memory::desc({k.cols, k.rows}, DataTypeOf(k.type), {1, static_cast<int64_t>(k.row_stride) / elem});
    const auto pd = impl_->Desc(k, s.weights, DNNL_RUNTIME_DIM_VAL);
    s.any_impl = pd.impl_info_str();
    // The reference implementation is far slower than MatMul's kernels: where it is all oneDNN has, not here.
    if (s.any_impl.rfind("ref", 0) == 0) return false;
    s.any = dnnl::matmul(pd);
    s.any_scratch = pd.scratchpad_desc().get_size();
    impl_->MakeFixed(k, s);
    impl_->shapes.emplace(k, std::move(s));
    return true;
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return false;
    return FromDnnl(e, Cat("matmul for ", w.rows, " x ", w.cols, " ", DTypeName(w.type)));
  }
}

absl::Status OneDnnMatMuls::SetMaxTokens(int64_t max_tokens) {
  if (max_tokens == impl_->max_tokens) return absl::OkStatus();
  impl_->max_tokens = max_tokens;
  try {
    for (auto& [k, s] : impl_->shapes) {
      s.fixed = dnnl::matmul();
      s.has_fixed = false;
      s.fixed_scratch = 0;
      s.fixed_impl.clear();
      impl_->MakeFixed(k, s);
    }
  } catch (const dnnl::error& e) {
    return FromDnnl(e, Cat("matmul for batches of ", max_tokens));
  }
  return absl::OkStatus();
}

size_t OneDnnMatMuls::ScratchBytes(int64_t max_tokens, int64_t max_cols) const {
  size_t scratchpad = 0;
  DType widest = DType::kF32;
  for (const auto& [k, s] : impl_->shapes) {
    scratchpad = std::max({scratchpad, s.fixed_scratch, s.any_scratch});
    if (k.type == DType::kBF16) widest = DType::kBF16;
  }
  return ActBytes(widest, max_tokens, max_cols) + AlignUp(scratchpad);
}

size_t OneDnnMatMuls::ScratchFor(const WeightMatrix& w, int64_t n_tok) const {
  auto it = impl_->shapes.find(KeyOf(w));
  if (it == impl_->shapes.end()) return 0;
  const Shape& s = it->second;
  const bool fixed = s.has_fixed && n_tok == impl_->max_tokens;
  return ActBytes(w.type, n_tok, w.cols) + (fixed ? s.fixed_scratch : s.any_scratch);
}

bool OneDnnMatMuls::Takes(const WeightMatrix& w, int64_t n_tok) const {
  return n_tok > kOneDnnMaxDecodeTokens && OneDnnTakesType(w.type) && w.layout == kGgufLayout &&
         impl_->shapes.contains(KeyOf(w));
}

absl::Status OneDnnMatMuls::MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y,
                                   void* scratch) const {
  const ShapeKey k = KeyOf(w);
  auto it = impl_->shapes.find(k);
  TANDEM_CHECK(it != impl_->shapes.end() && n_tok > kOneDnnMaxDecodeTokens);
  const Shape& s = it->second;
  const bool fixed = s.has_fixed && n_tok == impl_->max_tokens;
  auto* act = static_cast<uint8_t*>(scratch);
  void* scratchpad = act + ActBytes(w.type, n_tok, w.cols);
  const void* src = x;
  if (w.type == DType::kBF16) {  // llama.cpp's rounding of the activations, through MatMul's converter
    const Isa isa = ActiveIsa();
    const int n_threads = n_tok * w.cols >= internal::kMinParallelWork ? omp_get_max_threads() : 1;
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int64_t t = 0; t < n_tok; ++t) {
      internal::ConvertActivationRow(DType::kBF16, x + t * w.cols, act + sizeof(bf16_t) * t * w.cols, w.cols, isa);
    }
    src = act;
  }
  try {
    dnnl::stream stream(impl_->engine);
    const memory::desc src_md({n_tok, k.cols}, DataTypeOf(k.type), Tag::ab);
    const memory::desc dst_md({n_tok, k.rows}, memory::data_type::f32, Tag::ab);
    const memory::desc pad_md({static_cast<int64_t>(fixed ? s.fixed_scratch : s.any_scratch)}, memory::data_type::u8,
                              Tag::a);
    memory src_mem(src_md, impl_->engine, const_cast<void*>(src));
    memory w_mem(s.weights, impl_->engine, const_cast<void*>(w.data));
    memory dst_mem(dst_md, impl_->engine, y);
    memory pad_mem(pad_md, impl_->engine, scratchpad);
    (fixed ? s.fixed : s.any)
        .execute(stream, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, dst_mem},
                          {DNNL_ARG_SCRATCHPAD, pad_mem}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return FromDnnl(e, Cat("matmul of ", n_tok, " tokens with ", w.rows, " x ", w.cols, " ", DTypeName(w.type)));
  }
  return absl::OkStatus();
}

std::string OneDnnMatMuls::ImplOf(const WeightMatrix& w) const {
  auto it = impl_->shapes.find(KeyOf(w));
  if (it == impl_->shapes.end()) return "";
  return Cat(it->second.fixed_impl.empty() ? "-" : it->second.fixed_impl, " / ", it->second.any_impl);
}

}  // namespace tandem::cpu
