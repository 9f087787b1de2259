// OneDnnMatMuls: a cache of oneDNN matmul primitives by weight shape, made at plan time. oneDNN reports errors
// by exception (dnnl::error); they become absl::Status here and go no further.
#include "cpu_backend/onednn_matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <cstdlib>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_split.h"
#include "core/dtype.h"
#include "core/status.h"
#include "cpu_backend/f16_fast.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/packed_dequant.h"
#include "cpu_backend/repack.h"
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
  WeightLayout layout;
  bool operator==(const ShapeKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const ShapeKey& k) {
    return H::combine(std::move(h), k.type, k.rows, k.cols, k.row_stride, k.layout);
  }
};

ShapeKey KeyOf(const WeightMatrix& w) {
  const size_t row_bytes = RowBytes(w.type, w.cols);
  return {w.type, w.rows, w.cols, w.row_stride == 0 ? row_bytes : w.row_stride, w.layout};
}

// Packed quantized rows, dequantized tile by tile to bf16.
bool Quantized(const ShapeKey& k) { return k.layout == kPackedLayout; }
// Rows converted tile by tile into the scratch (F16, quantized) rather than read where they are.
bool Converted(const ShapeKey& k) { return k.type == DType::kF16 || Quantized(k); }

// oneDNN 2.6 has no f16 matmul on CPUs, so F16 rows are converted tile by tile, in one of two ways:
// - kF32: to f32, for f32 products of the same operands as MatMul's F16 kernels;
// - kBf16Split, where oneDNN runs bf16 on AMX: each f16 value v is exactly the sum of two bf16, hi (v rounded to 8
//   significant bits) and lo = v - hi (3 bits at most, |lo| <= 2^-8 |hi|). One bf16 matmul over three times the
//   columns, source rows [xhi | xlo | xhi] against weight rows [Whi | Whi | Wlo], sums Whi xhi + Whi xlo + Wlo xhi
//   in f32: W x but for Wlo xlo, under 2^-16 of each product. AMX multiplies bf16 so many times faster than
//   AVX-512 does f32 that three products should cost less than one (AVX512_BF16 is only twice as fast); measured,
//   they did not (F16RouteHere), so this route is taken only when asked for.
using F16Route = OneDnnF16;

// Whether oneDNN runs bf16 on AMX here (not when ONEDNN_MAX_CPU_ISA caps it below).
bool AmxHere() {
  try {
    return dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  } catch (const dnnl::error&) {
    return false;
  }
}

// kAuto resolved: env TANDEM_ONEDNN_F16=split|f32, else f32 tiles. The split was meant for AMX, but there too the
// f32 tiles ran F16 pp512 as fast (515-519 against 491-507 tok/s, Xeon VM, 2026-12-06) and they are exact.
F16Route F16RouteHere() {
  static const F16Route route = [] {
    if (const char* v = std::getenv("TANDEM_ONEDNN_F16"); v != nullptr && *v != '\0') {
      return std::strcmp(v, "split") == 0 ? F16Route::kBf16Split : F16Route::kF32;
    }
    return F16Route::kF32;
  }();
  return route;
}

// v (an f16 value) as hi + lo, both bf16, exactly; lo is 0 where v is not finite (Inf - Inf would be NaN).
inline void SplitHalf(float v, uint16_t& hi, uint16_t& lo) {
  hi = F32ToBf16(v);
  const float rest = v - Bf16ToF32(hi);
  lo = rest == rest ? F32ToBf16(rest) : uint16_t{0};
}

// v split (SplitHalf) into a row of three segments `cols` apart, at `at`: lo in segment lo_segment, hi in the others.
inline void PutSplit(float v, uint16_t* at, int64_t cols, int lo_segment) {
  uint16_t hi, lo;
  SplitHalf(v, hi, lo);
  for (int segment = 0; segment < 3; ++segment) at[segment * cols] = segment == lo_segment ? lo : hi;
}

absl::Status FromDnnl(const dnnl::error& e, std::string_view what) {
  return absl::InternalError(Cat("oneDNN ", what, ": ", e.what(), " (status ", static_cast<int>(e.status), ")"));
}

// F16 weights are converted in tiles of rows about this size (OneDnnOptions::f16_tile_bytes overrides it). Wider
// tiles make fewer, larger products, which oneDNN runs faster: F16 pp512 on a 2-layer Llama-2-7B-shaped file,
// -t 2, Zen 4, f32 tiles of 2 / 4 / 8 / 16 / 32 MiB: 231-247 / 272-280 / 250-253 / 276-298 / 274-293 tok/s in two
// rounds (2026-12-04, before tiles' products went to a dense buffer).
constexpr size_t kF16TileBytes = size_t{1} << 24;
// Quantized rows' bf16 tiles stay about the size of a core's L2, so that oneDNN reads what the dequantizer just
// wrote from there: Q4_K / Q6_K at 512 x 4096 x 4096, -t 2, Xeon with AMX, tiles of 1 / 2 / 4 / 8 / 32 MiB:
// 850 / 1054 / 1040 / 979 / 653 and 766 / 932 / 1083 / 972 / 669 GFLOP/s (2026-12-06).
constexpr size_t kQuantTileBytes = size_t{1} << 22;
constexpr int64_t kTileLdPad = 32;

struct Shape {
  F16Route f16 = F16Route::kF32;    // how F16 rows are converted (F16 only)
  // What the source and the weights are in: f32, or bf16.
  memory::data_type dt = memory::data_type::f32;
  int64_t k_dim = 0;                // the product's inner dimension: cols, or 3 * cols for kBf16Split
  int64_t tile_rows = 0;            // rows per product: all of them, or a converted tile's
  memory::desc weights;             // [k_dim, tile_rows]: over the file's rows, or over a tile's converted copy
  dnnl::matmul fixed, any, tail;    // batches of max_tokens; of any size (runtime M); the last, shorter tile
  bool has_fixed = false, has_tail = false;
  size_t fixed_scratch = 0, any_scratch = 0, tail_scratch = 0;
  std::string fixed_impl, any_impl;
};

size_t ElemBytes(const Shape& s) { return s.dt == memory::data_type::bf16 ? sizeof(bf16_t) : sizeof(float); }

// Whether the rows come in tiles of fewer than all of them. A tile's product then goes to a dense [n_tok,
// tile_rows] buffer, copied into y's columns after: oneDNN 2.6 runs brgemm only into a dense destination, and its
// fallback (gemm:jit) ran f32 at 171 GFLOP/s against brgemm's 207 on a Zen 4 (512 x 4096 x 1024, two threads).
bool Tiled(const ShapeKey& k, const Shape& s) { return s.tile_rows < k.rows; }

// Values between one column's and the next in a converted tile of n rows: for quantized rows, n and 32 more, so
// that the dequantizer's 16-row stores down a column do not all fall in one cache set (n is a multiple of 64).
int64_t TileLd(const ShapeKey& k, int64_t n) { return Quantized(k) ? n + kTileLdPad : n; }

// The converted activations, [n_tok, k_dim] (F32 reads x in place); then the tile of converted rows; then a
// tile's product.
size_t SrcBytes(const ShapeKey& k, const Shape& s, int64_t n_tok) {
  return k.type == DType::kF32 ? 0 : AlignUp(ElemBytes(s) * static_cast<size_t>(n_tok * s.k_dim));
}
size_t TileBytes(const ShapeKey& k, const Shape& s) {
  return Converted(k) ? AlignUp(ElemBytes(s) * static_cast<size_t>(TileLd(k, s.tile_rows) * s.k_dim)) : 0;
}
size_t ActBytes(const ShapeKey& k, const Shape& s, int64_t n_tok) {
  const size_t out = Tiled(k, s) ? AlignUp(sizeof(float) * static_cast<size_t>(n_tok * s.tile_rows)) : 0;
  return SrcBytes(k, s, n_tok) + TileBytes(k, s) + out;
}

// Converted tiles of rows about tile_bytes, a multiple of 64 rows (so of a packed group's 16).
int64_t TileRowsOf(const ShapeKey& k, const Shape& s, size_t tile_bytes) {
  if (!Converted(k)) return k.rows;
  const auto fit = static_cast<int64_t>(tile_bytes / (ElemBytes(s) * static_cast<size_t>(s.k_dim)));
  return std::min(k.rows, std::max<int64_t>(64, fit / 64 * 64));
}

// The weights of a tile of n rows: a converted tile's, [k_dim, n] with its rows' values for one column n apart for
// quantized rows (packed_dequant.h) and k_dim apart for F16 rows ("ba": row r's values at r * k_dim).
memory::desc TileWeights(const ShapeKey& k, const Shape& s, int64_t n) {
  if (!Quantized(k)) return memory::desc({s.k_dim, n}, s.dt, {1, s.k_dim});
  return memory::desc({s.k_dim, n}, s.dt, {TileLd(k, n), 1});
}

// Packed rows r0.. of w, n of them (both multiples of 16), into a bf16 tile whose columns are ld apart.
void DequantizeRows(const WeightMatrix& w, int64_t r0, int64_t n, void* tile, int64_t ld, int n_threads) {
  constexpr int64_t kGroupsPerCall = 4;  // 64 rows: two whole cache lines of a column (DequantizePacked)
  const int64_t groups = n / kPackRows;
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t g = 0; g < groups; g += kGroupsPerCall) {
    DequantizePacked(w, r0 / kPackRows + g, std::min(kGroupsPerCall, groups - g),
                     static_cast<bf16_t*>(tile) + kPackRows * g, ld);
  }
}

// F16 rows r0.. of w, n of them, into a tile of the route's rows ([k_dim] each, dense).
void ConvertF16Rows(const ShapeKey& k, const Shape& s, const void* data, int64_t r0, int64_t n, void* tile,
                    int n_threads) {
  const auto* rows = static_cast<const uint8_t*>(data) + static_cast<size_t>(r0) * k.row_stride;
  const int64_t cols = k.cols;
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const auto* h = reinterpret_cast<const f16_t*>(rows + static_cast<size_t>(r) * k.row_stride);
    if (s.f16 == F16Route::kF32) {
      float* f = static_cast<float*>(tile) + r * cols;
      for (int64_t c = 0; c < cols; ++c) f[c] = HalfToFloat(h[c]);
    } else {  // [Whi | Whi | Wlo]
      uint16_t* b = static_cast<uint16_t*>(tile) + r * s.k_dim;
      for (int64_t c = 0; c < cols; ++c) PutSplit(HalfToFloat(h[c]), b + c, cols, 2);
    }
  }
}

// The activations as the route reads them: llama.cpp's rounding for the weight type (bf16 for BF16, f16 for F16,
// through MatMul's converter), bf16 for quantized weights, and for kBf16Split rows [xhi | xlo | xhi] of the
// f16-rounded values.
void ConvertActivations(const ShapeKey& k, const Shape& s, const float* x, int64_t n_tok, void* src, int n_threads) {
  const int64_t cols = k.cols;
  const Isa isa = ActiveIsa();
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * cols;
    if (k.type == DType::kF16 && s.f16 == F16Route::kBf16Split) {
      uint16_t* b = static_cast<uint16_t*>(src) + t * s.k_dim;  // [xhi | xlo | xhi]
      for (int64_t c = 0; c < cols; ++c) PutSplit(RoundThroughHalf(xt[c]), b + c, cols, 1);
    } else {
      auto* row = static_cast<uint8_t*>(src) + ElemBytes(s) * static_cast<size_t>(t * cols);
      const DType as = k.type == DType::kBF16 || Quantized(k) ? DType::kBF16 : DType::kF16;
      internal::ConvertActivationRow(as, xt, row, cols, isa);
    }
  }
}

}  // namespace

bool OneDnnEnabled() {
  static const bool enabled = [] {
    if (const char* v = std::getenv("TANDEM_ONEDNN"); v != nullptr && *v != '\0') return std::strcmp(v, "0") != 0;
    return std::getenv("TANDEM_ISA") == nullptr;  // a run with our kernels capped is a run of our kernels
  }();
  return enabled;
}

bool OneDnnTakesType(DType type) { return type == DType::kF32 || type == DType::kBF16 || type == DType::kF16; }

namespace {

uint64_t Bit(DType type) { return uint64_t{1} << (static_cast<int>(type) & 63); }

// TANDEM_ONEDNN_QUANT as a mask; nullopt when unset.
std::optional<uint64_t> QuantTypesFromEnv() {
  static const std::optional<uint64_t> mask = []() -> std::optional<uint64_t> {
    const char* v = std::getenv("TANDEM_ONEDNN_QUANT");
    if (v == nullptr || *v == '\0') return std::nullopt;
    if (std::strcmp(v, "all") == 0) return ~uint64_t{0};
    uint64_t m = 0;
    for (absl::string_view name : absl::StrSplit(v, ',')) {
      const std::optional<DType> t = DTypeFromName(std::string_view(name.data(), name.size()));
      if (t.has_value()) m |= Bit(*t);
    }
    return m;
  }();
  return mask;
}

std::atomic<int64_t> g_quant_min_tokens[64];  // by DType; zero-initialised: static storage

}  // namespace

bool OneDnnQuantTakesType(DType type) { return internal::PackedBlockBytes(type) > 0; }

int64_t OneDnnQuantMinTokens(DType type) {
  if (!OneDnnQuantTakesType(type)) return 0;
  if (const std::optional<uint64_t> env = QuantTypesFromEnv(); env.has_value()) {
    return (*env & Bit(type)) != 0 ? kOneDnnMaxDecodeTokens + 1 : 0;
  }
  return g_quant_min_tokens[static_cast<int>(type) & 63].load(std::memory_order_relaxed);
}

void SetOneDnnQuantMinTokens(std::span<const OneDnnQuantSetting> settings) {
  for (auto& v : g_quant_min_tokens) v.store(0, std::memory_order_relaxed);
  for (const OneDnnQuantSetting& s : settings) {
    const int64_t min = s.min_tokens > kOneDnnMaxDecodeTokens ? s.min_tokens : kOneDnnMaxDecodeTokens + 1;
    g_quant_min_tokens[static_cast<int>(s.type) & 63].store(min, std::memory_order_relaxed);
  }
}

double OneDnnPeakOpsPerCycle(DType type) {
  constexpr double kAmxBf16 = 2048;
  if (!AmxHere()) return 0;
  if (type == DType::kBF16 || OneDnnQuantTakesType(type)) return kAmxBf16;
  if (type == DType::kF16 && F16RouteHere() == F16Route::kBf16Split) return kAmxBf16 / 3;  // three products
  return 0;
}

struct OneDnnMatMuls::Impl {
  F16Route f16 = F16Route::kAuto;
  OneDnnQuant quant = OneDnnQuant::kAuto;
  size_t f16_tile_bytes = kF16TileBytes;
  size_t quant_tile_bytes = kQuantTileBytes;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  int64_t max_tokens = 0;
  absl::flat_hash_map<ShapeKey, Shape> shapes;

  // A matmul of m tokens (DNNL_RUNTIME_DIM_VAL: any) into n columns (rows of the weights): of y, whose rows are
  // k.rows apart, or of a tile's dense product. With a user scratchpad.
  dnnl::matmul::primitive_desc Desc(const ShapeKey& k, const Shape& s, const memory::desc& weights, int64_t m,
                                    int64_t n) const {
    const memory::desc src({m, s.k_dim}, s.dt, Tag::ab);
    const memory::desc dst({m, n}, memory::data_type::f32, {Tiled(k, s) ? n : k.rows, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), attr, engine);
  }

  void MakeFixed(const ShapeKey& k, Shape& s) const {
    if (max_tokens <= kOneDnnMaxDecodeTokens) return;
    const auto pd = Desc(k, s, s.weights, max_tokens, s.tile_rows);
    s.fixed = dnnl::matmul(pd);
    s.has_fixed = true;
    s.fixed_scratch = pd.scratchpad_desc().get_size();
    s.fixed_impl = pd.impl_info_str();
  }
};

OneDnnMatMuls::OneDnnMatMuls(const OneDnnOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->f16 = options.f16 == F16Route::kAuto ? F16RouteHere() : options.f16;
  impl_->quant = options.quant;
  if (options.f16_tile_bytes != 0) impl_->f16_tile_bytes = options.f16_tile_bytes;
  if (options.quant_tile_bytes != 0) impl_->quant_tile_bytes = options.quant_tile_bytes;
}
OneDnnMatMuls::~OneDnnMatMuls() = default;

bool OneDnnMatMuls::Routable(const WeightMatrix& w) const {
  if (w.rows < kOneDnnMinRows || w.cols == 0) return false;
  if (w.layout == kGgufLayout) return OneDnnTakesType(w.type);
  if (!CanDequantizePacked(w) || impl_->quant == OneDnnQuant::kNone) return false;
  return impl_->quant == OneDnnQuant::kAll || OneDnnQuantMinTokens(w.type) > 0;
}

absl::StatusOr<bool> OneDnnMatMuls::Prepare(const WeightMatrix& w) {
  if (!Routable(w)) return false;
  const ShapeKey k = KeyOf(w);
  if (impl_->shapes.contains(k)) return true;
  try {
    Shape s;
    if (k.type == DType::kF16) s.f16 = impl_->f16;
    const bool split = k.type == DType::kF16 && s.f16 == F16Route::kBf16Split;
    s.dt = k.type == DType::kBF16 || split || Quantized(k) ? memory::data_type::bf16 : memory::data_type::f32;
    s.k_dim = split ? 3 * k.cols : k.cols;
    s.tile_rows = TileRowsOf(k, s, Quantized(k) ? impl_->quant_tile_bytes : impl_->f16_tile_bytes);
    if (Converted(k)) {
      s.weights = TileWeights(k, s, s.tile_rows);
    } else {  // W[r][c] at r * stride + c: element (c, r) of a [cols, rows] matrix with strides (1, stride)
      const auto elem = static_cast<int64_t>(Traits(w.type).block_bytes);
      if (static_cast<int64_t>(k.row_stride) % elem != 0) return false;
      s.weights = memory::desc({k.cols, k.rows}, s.dt, {1, static_cast<int64_t>(k.row_stride) / elem});
    }
    const auto pd = impl_->Desc(k, s, s.weights, DNNL_RUNTIME_DIM_VAL, s.tile_rows);
    s.any_impl = pd.impl_info_str();
    // The reference implementation is far slower than MatMul's kernels: where it is all oneDNN has, not here.
    if (s.any_impl.rfind("ref", 0) == 0) return false;
    s.any = dnnl::matmul(pd);
    s.any_scratch = pd.scratchpad_desc().get_size();
    if (const int64_t tail = k.rows % s.tile_rows; tail != 0) {
      const auto tail_pd = impl_->Desc(k, s, TileWeights(k, s, tail), DNNL_RUNTIME_DIM_VAL, tail);
      s.tail = dnnl::matmul(tail_pd);
      s.has_tail = true;
      s.tail_scratch = tail_pd.scratchpad_desc().get_size();
    }
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

size_t OneDnnMatMuls::ScratchBytes(int64_t max_tokens) const {
  size_t bytes = 0;
  for (const auto& [k, s] : impl_->shapes) {
    const size_t pad = std::max({s.has_fixed ? s.fixed_scratch : 0, s.any_scratch, s.tail_scratch});
    bytes = std::max(bytes, ActBytes(k, s, max_tokens) + AlignUp(pad));
  }
  return bytes;
}

size_t OneDnnMatMuls::ScratchFor(const WeightMatrix& w, int64_t n_tok) const {
  const ShapeKey k = KeyOf(w);
  auto it = impl_->shapes.find(k);
  if (it == impl_->shapes.end()) return 0;
  const Shape& s = it->second;
  const bool fixed = s.has_fixed && n_tok == impl_->max_tokens;
  return ActBytes(k, s, n_tok) + AlignUp(std::max(fixed ? s.fixed_scratch : s.any_scratch, s.tail_scratch));
}

bool OneDnnMatMuls::Takes(const WeightMatrix& w, int64_t n_tok) const {
  if (n_tok <= kOneDnnMaxDecodeTokens || !impl_->shapes.contains(KeyOf(w))) return false;
  if (w.layout == kGgufLayout || impl_->quant == OneDnnQuant::kAll) return true;
  const int64_t min_tokens = OneDnnQuantMinTokens(w.type);  // now: the settings may have changed since Prepare
  return min_tokens > 0 && n_tok >= min_tokens;
}

absl::Status OneDnnMatMuls::MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y,
                                   void* scratch) const {
  const ShapeKey k = KeyOf(w);
  auto it = impl_->shapes.find(k);
  TANDEM_CHECK(it != impl_->shapes.end() && n_tok > kOneDnnMaxDecodeTokens);
  const Shape& s = it->second;
  const bool fixed = s.has_fixed && n_tok == impl_->max_tokens;
  auto* act = static_cast<uint8_t*>(scratch);
  uint8_t* scratchpad = act + ActBytes(k, s, n_tok);
  void* tile = act + SrcBytes(k, s, n_tok);
  auto* tile_out = reinterpret_cast<float*>(act + SrcBytes(k, s, n_tok) + TileBytes(k, s));
  const bool tiled = Tiled(k, s);
  const int n_threads = omp_get_max_threads();
  const void* src = x;
  if (k.type != DType::kF32) {
    ConvertActivations(k, s, x, n_tok, act, n_threads);
    src = act;
  }
  try {
    dnnl::stream stream(impl_->engine);
    const memory::desc src_md({n_tok, s.k_dim}, s.dt, Tag::ab);
    memory src_mem(src_md, impl_->engine, const_cast<void*>(src));
    for (int64_t r0 = 0; r0 < k.rows; r0 += s.tile_rows) {
      const int64_t n = std::min(s.tile_rows, k.rows - r0);
      const bool tail = n < s.tile_rows;
      const void* weights = w.data;
      if (Quantized(k)) {
        DequantizeRows(w, r0, n, tile, TileLd(k, n), n_threads);
        weights = tile;
      } else if (k.type == DType::kF16) {
        ConvertF16Rows(k, s, w.data, r0, n, tile, n_threads);
        weights = tile;
      }
      const dnnl::matmul& prim = tail ? s.tail : fixed ? s.fixed : s.any;
      const size_t pad = tail ? s.tail_scratch : fixed ? s.fixed_scratch : s.any_scratch;
      const memory::desc w_md = tail ? TileWeights(k, s, n) : s.weights;
      const memory::desc dst_md({n_tok, n}, memory::data_type::f32, {tiled ? n : k.rows, 1});
      const memory::desc pad_md({static_cast<int64_t>(pad)}, memory::data_type::u8, Tag::a);
      memory w_mem(w_md, impl_->engine, const_cast<void*>(weights));
      memory dst_mem(dst_md, impl_->engine, tiled ? tile_out : y + r0);
      memory pad_mem(pad_md, impl_->engine, scratchpad);
      prim.execute(stream, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, dst_mem},
                            {DNNL_ARG_SCRATCHPAD, pad_mem}});
      stream.wait();
      if (tiled) {
#pragma omp parallel for num_threads(n_threads) schedule(static)
        for (int64_t t = 0; t < n_tok; ++t) {
          std::memcpy(y + t * k.rows + r0, tile_out + t * n, sizeof(float) * static_cast<size_t>(n));
        }
      }
    }
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
