// libFuzzer target: any byte string either parses into a file whose every field is consistent, or fails with a
// message. Whatever parses must also pass through the config checks, the summary and the writer without a crash,
// and what the writer makes must read back the same.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "core/gguf.h"
#include "arch/model_config.h"
#include "arch/summary.h"
#include "core/status.h"

namespace {

using namespace tandem;

// Touches every value (including nested arrays) through every accessor.
size_t Walk(const GgufValue& v) {
  size_t n = 1 + GgufTypeName(v.type).size();
  if (v.AsInt()) n += 1;
  if (v.AsUint()) n += 1;
  if (v.AsFloat()) n += 1;
  if (const std::string* s = v.AsString()) n += s->size();
  if (const GgufArray* a = v.AsArray()) {
    TANDEM_CHECK(v.type == GgufType::kArray);
    for (const GgufValue& item : a->items) {
      TANDEM_CHECK(item.type == a->elem_type);
      n += Walk(item);
    }
  }
  return n;
}

bool SameValue(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.v.index() != b.v.index()) return false;
  if (const GgufArray* aa = a.AsArray()) {
    const GgufArray* ba = b.AsArray();
    if (aa->elem_type != ba->elem_type || aa->items.size() != ba->items.size()) return false;
    for (size_t i = 0; i < aa->items.size(); ++i) {
      if (!SameValue(aa->items[i], ba->items[i])) return false;
    }
    return true;
  }
  if (const double* d = std::get_if<double>(&a.v)) {
    const double e = std::get<double>(b.v);
    return (*d != *d && e != e) || std::memcmp(d, &e, sizeof e) == 0 || *d == e;
  }
  return a.v == b.v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<GgufFile>> parsed = GgufFile::FromBytes(std::span<const uint8_t>(data, size));
  if (!parsed.ok()) {
    TANDEM_CHECK(!parsed.status().message().empty());
    return 0;
  }
  const GgufFile& f = **parsed;
  TANDEM_CHECK(f.data_offset() <= f.file_size());
  size_t walked = 0;
  for (const GgufKV& kv : f.metadata()) {
    TANDEM_CHECK(f.Find(kv.key) == &kv.value);
    walked += Walk(kv.value);
  }
  uint8_t sink = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    TANDEM_CHECK(f.FindTensor(t.name) == &t);
    TANDEM_CHECK(t.n_dims >= 1 && t.n_dims <= 4);
    TANDEM_CHECK(t.offset % f.alignment() == 0);
    TANDEM_CHECK(t.offset + t.nbytes <= f.file_size() - f.data_offset());
    if (t.nbytes > 0) sink ^= f.TensorData(t)[0] ^ f.TensorData(t)[t.nbytes - 1];  // ASan checks the bounds
  }

  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(f);
  if (cfg.ok()) {
    TANDEM_CHECK(cfg->head_dim >= 1 && cfg->n_embd >= 1);
    TANDEM_CHECK(cfg->n_head % cfg->n_head_kv == 0);
    TANDEM_CHECK(cfg->n_rot <= cfg->head_dim && cfg->n_rot % 2 == 0);
    TANDEM_CHECK(!cfg->is_moe() || (cfg->n_expert_used >= 1 && cfg->n_expert_used <= cfg->n_expert));
    TANDEM_CHECK(cfg->bos_id < cfg->n_vocab && cfg->eos_id < cfg->n_vocab);
  }
  const ModelSummary s = SummarizeModel(f, cfg.ok() ? &*cfg : nullptr);
  uint64_t sum = 0;
  for (const GgufTensorInfo& t : f.tensors()) sum += t.nbytes;
  TANDEM_CHECK(s.total_bytes == sum && s.totals.total() == sum);

  // Whatever reads must write, and read back the same.
  std::vector<GgufWriteTensor> tensors;
  for (const GgufTensorInfo& t : f.tensors()) {
    tensors.push_back({t.name, t.type, t.n_dims, t.ne, std::span<const uint8_t>(f.TensorData(t), t.nbytes)});
  }
  GgufWriteOptions opts;
  opts.version = f.version();
  opts.alignment = f.alignment();
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeGguf(f.metadata(), tensors, opts);
  TANDEM_CHECK(bytes.ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> back = GgufFile::FromBytes(*bytes);
  TANDEM_CHECK(back.ok());
  TANDEM_CHECK((*back)->metadata().size() == f.metadata().size());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    TANDEM_CHECK((*back)->metadata()[i].key == f.metadata()[i].key);
    TANDEM_CHECK(SameValue((*back)->metadata()[i].value, f.metadata()[i].value));
  }
  TANDEM_CHECK((*back)->tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& a = f.tensors()[i];
    const GgufTensorInfo& b = (*back)->tensors()[i];
    TANDEM_CHECK(a.name == b.name && a.type == b.type && a.ne == b.ne && a.nbytes == b.nbytes);
    TANDEM_CHECK(std::memcmp(f.TensorData(a), (*back)->TensorData(b), a.nbytes) == 0);
  }
  return static_cast<int>((walked + sink) & 0);  // libFuzzer wants 0; keeps the walk from being optimised out
}
