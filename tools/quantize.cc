#include "tools/quantize.h"

#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "core/quant.h"
#include "core/status.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// An integer key, the first element of a per-layer array; 0 if absent or not an integer.
int MetaInt(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return 0;
  if (const GgufArray* a = v->AsArray(); a != nullptr) {
    if (a->items.empty()) return 0;
    v = &a->items[0];
  }
  const std::optional<int64_t> n = v->AsInt();
  return n && *n > 0 && *n < (1 << 30) ? static_cast<int>(*n) : 0;
}

// The same file, however spelled or linked. A path that does not exist yet is no existing file.
bool SameFile(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

// Rows [first, first + n) of a tensor from src_type to dst_type, over the threads. A quantized target gets finite
// values only, as llama-quantize checks its output: a NaN or infinity is an error naming the row.
absl::Status ConvertRows(const GgufTensorInfo& t, const uint8_t* src, DType dst_type, int64_t first, int64_t n,
                         int n_threads, std::vector<std::vector<float>>& bufs, uint8_t* dst) {
  const int64_t cols = t.ne[0];
  const size_t src_row = RowBytes(t.type, cols), dst_row = RowBytes(dst_type, cols);
  const bool check_finite = !IsFloat(dst_type);
  std::atomic<int64_t> bad_row{-1};
  absl::Status first_error;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 4)
  for (int64_t r = first; r < first + n; ++r) {
    if (bad_row.load(std::memory_order_relaxed) >= 0) continue;
    float* x = bufs[omp_get_thread_num()].data();
    DequantizeRow(t.type, src + r * src_row, x, cols);
    if (check_finite) {
      bool finite = true;
      for (int64_t c = 0; c < cols; ++c) finite &= std::isfinite(x[c]);
      if (!finite) {
        bad_row.store(r);
        continue;
      }
    }
    absl::Status st = QuantizeRow(dst_type, x, dst + r * dst_row, cols, QuantizeEffort::kBest);
    if (!st.ok()) {
#pragma omp critical
      first_error = st;
      bad_row.store(r);
    }
  }
  if (!first_error.ok()) return InvalidArgument("tensor ", t.name, ": ", first_error.message());
  if (bad_row.load() >= 0) {
    return InvalidArgument("tensor ", t.name, " holds a NaN or infinity in row ", bad_row.load(),
                           ", which cannot be quantized");
  }
  return absl::OkStatus();
}

// One output tensor: the source's bytes when the type stays, else converted row by row in chunks, reporting
// progress after each.
absl::Status ProduceTensor(const GgufFile& in, const GgufTensorInfo& t, DType type, int n_threads,
                           const std::function<void(uint64_t)>& advance, uint8_t* dst) {
  const uint8_t* src = in.TensorData(t);
  if (type == t.type) {
    std::memcpy(dst, src, t.nbytes);
    advance(t.nbytes);
  } else if (t.ne[0] > 0) {
    const int64_t cols = t.ne[0];
    const int64_t rows = t.n_elements() / cols;
    std::vector<std::vector<float>> bufs(n_threads, std::vector<float>(cols));
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 22) / cols);  // about 4M elements between reports
    const size_t src_row = RowBytes(t.type, cols);
    for (int64_t r = 0; r < rows; r += chunk) {
      const int64_t n = std::min(chunk, rows - r);
      TANDEM_RETURN_IF_ERROR(ConvertRows(t, src, type, r, n, n_threads, bufs, dst));
      advance(n * src_row);
    }
  }
  in.ReleasePages(src, t.nbytes);  // read once: keep one tensor resident, not the whole model
  return absl::OkStatus();
}

// While it lives, Ctrl-C, a hangup or a kill first removes the half-written OUT.tmp, then ends the process by
// the signal as it would have ended. A signal the process was started ignoring stays ignored.
class RemoveOnSignal {
 public:
  explicit RemoveOnSignal(const std::string& path) {
    if (path.size() >= sizeof path_) return;  // never unlink a truncated name
    std::memcpy(path_, path.c_str(), path.size() + 1);
    struct sigaction sa = {};
    sa.sa_handler = &OnSignal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < kSignals; ++i) {
      sigaction(kSignal[i], &sa, &old_[i]);
      if (old_[i].sa_handler == SIG_IGN) sigaction(kSignal[i], &old_[i], nullptr);  // stays ignored (nohup, &)
    }
    armed_ = true;
  }
  ~RemoveOnSignal() {
    if (!armed_) return;
    for (int i = 0; i < kSignals; ++i) sigaction(kSignal[i], &old_[i], nullptr);
    path_[0] = '\0';
  }
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

 private:
  static void OnSignal(int sig) {  // async-signal-safe calls only
    if (path_[0] != '\0') unlink(path_);
    signal(sig, SIG_DFL);
    raise(sig);
  }
  static constexpr int kSignals = 3;
  static constexpr int kSignal[kSignals] = {SIGINT, SIGTERM, SIGHUP};
  static inline char path_[4096] = {};
  struct sigaction old_[kSignals] = {};
  bool armed_ = false;
};

// The input's keys, less those the writer or llama-quantize set again: the alignment (WriteGguf writes it), the
// split keys (one file out), and the file type and quantization version, appended last as llama-quantize does.
std::vector<GgufKV> OutputMetadata(const GgufFile& in, QuantMix type) {
  std::vector<GgufKV> kv;
  for (const GgufKV& k : in.metadata()) {
    if (k.key == "general.alignment" || k.key == "general.file_type" || k.key == "general.quantization_version" ||
        k.key == "split.no" || k.key == "split.count" || k.key == "split.tensors.count") {
      continue;
    }
    kv.push_back(k);
  }
  kv.push_back({"general.quantization_version", GgufU32(2)});
  kv.push_back({"general.file_type", GgufU32(QuantMixFileType(type))});
  return kv;
}

}  // namespace

absl::StatusOr<std::vector<QuantizePlanEntry>> PlanQuantize(const GgufFile& file, QuantMix type,
                                                            bool allow_requantize) {
  const GgufValue* arch_value = file.Find("general.architecture");
  if (arch_value == nullptr || arch_value->AsString() == nullptr || arch_value->AsString()->empty()) {
    return InvalidArgument(file.path(), ": not a model: no general.architecture");
  }
  const std::string arch = *arch_value->AsString();
  if (MetaInt(file, "split.count") > 1) {
    return InvalidArgument(file.path(), " is one part of a split model (split.count ", MetaInt(file, "split.count"),
                           "); merge it first (llama-gguf-split --merge)");
  }
  const QuantMixModel model{.arch = arch, .n_layer = MetaInt(file, arch + ".block_count"),
                            .n_expert = MetaInt(file, arch + ".expert_count"),
                            .n_head = MetaInt(file, arch + ".attention.head_count"),
                            .n_head_kv = MetaInt(file, arch + ".attention.head_count_kv")};
  if (model.n_layer < 1) return InvalidArgument(file.path(), ": not a model: no ", arch, ".block_count");
  std::vector<QuantMixFileTensor> tensors;
  tensors.reserve(file.tensors().size());
  for (const GgufTensorInfo& t : file.tensors()) tensors.push_back({.name = t.name, .ne = t.ne, .type = t.type});
  TANDEM_ASSIGN_OR_RETURN(const std::vector<QuantMixChoice> choices, QuantMixChooseFile(type, model, tensors));

  std::vector<QuantizePlanEntry> plan(choices.size());
  for (size_t i = 0; i < choices.size(); ++i) {
    const GgufTensorInfo& t = file.tensors()[i];
    const QuantMixChoice& c = choices[i];
    if (c.no_fallback) {
      return InvalidArgument("tensor ", t.name, ": rows of ", t.ne[0], " elements do not divide into ",
                             DTypeName(c.wanted), " blocks of ", Traits(c.wanted).block_elems,
                             ", and llama.cpp has no fallback type for ", DTypeName(c.wanted));
    }
    if (c.type != t.type && !IsFloat(t.type) && !allow_requantize) {
      return InvalidArgument("tensor ", t.name, " is ", DTypeName(t.type), " already; quantizing it again to ",
                             DTypeName(c.type), " adds a second rounding (--allow-requantize does it anyway)");
    }
    plan[i] = {.type = c.type, .fell_back = c.fell_back()};
  }
  return plan;
}

absl::StatusOr<QuantizeReport> QuantizeModel(const QuantizeOptions& o) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> in, GgufFile::Open(o.input));
  const std::string tmp = o.output + ".tmp";
  if (SameFile(o.input, o.output)) return InvalidArgument("input and output are the same file: ", o.output);
  if (SameFile(o.input, tmp)) return InvalidArgument("the output is written first as ", tmp, ", which is the input");
  std::error_code ec;
  if (fs::is_directory(o.output, ec)) return InvalidArgument(o.output, " is a directory");
  TANDEM_ASSIGN_OR_RETURN(const std::vector<QuantizePlanEntry> plan,
                          PlanQuantize(*in, o.type, o.allow_requantize));

  QuantizeReport report{.n_tensors = static_cast<int>(plan.size()), .input_bytes = in->file_size()};
  uint64_t total = 0, done = 0;
  for (const GgufTensorInfo& t : in->tensors()) total += t.nbytes;
  const int n_threads = o.n_threads > 0 ? o.n_threads : omp_get_max_threads();
  const std::function<void(uint64_t)> advance = [&](uint64_t bytes) {
    done += bytes;
    if (o.progress) o.progress(done, total);
  };
  std::vector<GgufWriteTensor> tensors;
  tensors.reserve(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const GgufTensorInfo& t = in->tensors()[i];
    const DType type = plan[i].type;
    ++report.tensors_by_type[type];
    if (plan[i].fell_back) ++report.n_fallback;
    if (type != t.type && !IsFloat(t.type)) ++report.n_requantized;
    GgufWriteTensor w{.name = t.name, .type = type, .n_dims = t.n_dims, .ne = t.ne};
    w.produce = [&in, &t, type, n_threads, &advance](uint8_t* dst, size_t) {
      return ProduceTensor(*in, t, type, n_threads, advance, dst);
    };
    tensors.push_back(std::move(w));
  }
  const RemoveOnSignal remove_on_signal(tmp);
  absl::Status written = WriteGguf(tmp, OutputMetadata(*in, o.type), tensors,
                                   {.version = 3, .alignment = in->alignment()});
  if (written.ok()) {
    fs::rename(tmp, o.output, ec);
    if (ec) written = absl::PermissionDeniedError(Cat("cannot rename ", tmp, " to ", o.output, ": ", ec.message()));
  }
  if (!written.ok()) {
    fs::remove(tmp, ec);
    return written;
  }
  report.output_bytes = fs::file_size(o.output, ec);
  if (o.progress && done < total) o.progress(total, total);
  return report;
}

}  // namespace tandem::cli
