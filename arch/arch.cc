#include "arch/arch.h"

#include <algorithm>

#include "core/status.h"

namespace tandem {

const Architecture& LlamaArchitecture();     // arch/llama.cc
const Architecture& Qwen2Architecture();     // arch/qwen.cc
const Architecture& Qwen3Architecture();     // arch/qwen.cc
const Architecture& Qwen3MoeArchitecture();  // arch/qwen.cc
const Architecture& Qwen2MoeArchitecture();  // arch/qwen.cc
const Architecture& GptOssArchitecture();    // arch/gpt_oss.cc

namespace {

const std::vector<const Architecture*>& Registry() {
  static const std::vector<const Architecture*> kAll = {&LlamaArchitecture(), &Qwen2Architecture(),
                                                        &Qwen3Architecture(), &Qwen3MoeArchitecture(),
                                                        &Qwen2MoeArchitecture(), &GptOssArchitecture()};
  return kAll;
}

std::string SupportedNames() {
  std::string s;
  for (const Architecture* a : Registry()) s += Cat(s.empty() ? "'" : ", '", a->name(), "' (", a->family(), ")");
  return s;
}

// What the tensors decide: the vocabulary, a tied head, the experts' spelling.
void FinishFromTensors(const SchemaMatch& m, ModelConfig& cfg) {
  cfg.n_vocab = static_cast<int>(m.vocab());
  cfg.legacy_experts = m.per_expert_spelling();
  cfg.tied_output = false;
  for (size_t e = 0; e < m.schema().size(); ++e) {
    if (!m.schema()[e].fallback.empty() && m.Find(static_cast<int>(e), 0) == nullptr) cfg.tied_output = true;
  }
}

WeightMatrix MatrixOf(const GgufTensorInfo& t, const uint8_t* data, bool stack, int64_t slice) {
  WeightMatrix m;
  m.type = t.type;
  m.cols = t.ne[0];
  const int dims = std::max(1, t.n_dims - (stack ? 1 : 0));
  m.rows = 1;
  for (int d = 1; d < dims; ++d) m.rows *= t.ne[d];
  m.row_stride = RowBytes(t.type, m.cols);
  m.data = data == nullptr ? nullptr : data + static_cast<size_t>(slice) * m.row_stride * static_cast<size_t>(m.rows);
  return m;
}

}  // namespace

const Architecture* FindArchitecture(std::string_view name) {
  for (const Architecture* a : Registry()) {
    if (a->name() == name) return a;
  }
  return nullptr;
}

std::span<const Architecture* const> Architectures() { return Registry(); }

absl::StatusOr<ModelSchema> ReadModelSchema(const GgufFile& file) {
  ModelSchema m;
  if (file.tensors().empty()) {
    return InvalidArgument("a vocab-only GGUF (a tokenizer, no weights): `tandem tokenize -m` reads it; running or "
                           "planning needs a model");
  }
  const GgufValue* arch = file.Find("general.architecture");
  if (!arch) return InvalidArgument("missing required key 'general.architecture'");
  if (!arch->AsString()) {
    return InvalidArgument("key 'general.architecture': type ", GgufTypeName(arch->type), ", expected STRING");
  }
  m.cfg.arch = *arch->AsString();
  m.arch = FindArchitecture(m.cfg.arch);
  if (m.arch == nullptr) {
    return Unimplemented("key 'general.architecture': '", m.cfg.arch, "' is not supported; tandem runs ",
                         SupportedNames());
  }
  if (const GgufValue* name = file.Find("general.name"); name && name->AsString()) m.cfg.name = *name->AsString();
  TANDEM_RETURN_IF_ERROR(ReadHParams(file, m.arch->hparams(), m.cfg));
  TANDEM_RETURN_IF_ERROR(m.arch->FinishHParams(file, m.cfg));
  TANDEM_ASSIGN_OR_RETURN(m.match, SchemaMatch::Match(m.arch->schema(), m.arch->name(), m.cfg, file.tensors()));
  FinishFromTensors(m.match, m.cfg);
  TANDEM_RETURN_IF_ERROR(ReadVocabKeys(file, m.cfg));
  return m;
}

absl::StatusOr<ModelSchema> MatchModelSchema(const ModelConfig& cfg, std::span<const GgufTensorInfo> tensors) {
  ModelSchema m;
  m.cfg = cfg;
  m.arch = FindArchitecture(cfg.arch);
  if (m.arch == nullptr) {
    return Unimplemented("architecture '", cfg.arch, "' is not supported; tandem runs ", SupportedNames());
  }
  TANDEM_ASSIGN_OR_RETURN(m.match, SchemaMatch::Match(m.arch->schema(), m.arch->name(), m.cfg, tensors));
  FinishFromTensors(m.match, m.cfg);
  return m;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const GgufFile& file) {
  TANDEM_ASSIGN_OR_RETURN(ModelSchema m, ReadModelSchema(file));
  return m.cfg;
}

UnitWeights BindUnit(const ModelSchema& model, UnitKind kind, int layer, const TensorData& data_of) {
  const Schema schema = model.match.schema();
  UnitWeights w;
  w.kind = kind;
  w.layer = layer;
  w.n_expert = model.cfg.n_expert;
  int n_slots = 0, n_expert_slots = 0;
  for (const TensorEntry& e : schema) {
    if (e.unit != kind) continue;
    (e.expert_stack() ? n_expert_slots : n_slots) = std::max(e.expert_stack() ? n_expert_slots : n_slots, e.slot + 1);
  }
  w.slots.resize(n_slots);
  w.expert_slots.resize(static_cast<size_t>(n_expert_slots) * std::max(w.n_expert, 0));
  auto data = [&](const GgufTensorInfo& t) { return data_of ? data_of(t) : nullptr; };
  for (size_t i = 0; i < schema.size(); ++i) {
    const TensorEntry& e = schema[i];
    if (e.unit != kind) continue;
    const int entry = static_cast<int>(i);
    if (e.expert_stack()) {
      for (int x = 0; x < w.n_expert; ++x) {
        WeightMatrix& slot = w.expert_slots[static_cast<size_t>(e.slot) * w.n_expert + x];
        if (const GgufTensorInfo* t = model.match.FindExpert(entry, layer, x)) {
          slot = MatrixOf(*t, data(*t), /*stack=*/false, 0);
        } else if (const GgufTensorInfo* s = model.match.Find(entry, layer)) {
          slot = MatrixOf(*s, data(*s), /*stack=*/true, x);
        }
      }
      continue;
    }
    const GgufTensorInfo* t = model.match.Find(entry, layer);
    if (t == nullptr && !e.fallback.empty()) {
      for (size_t f = 0; f < schema.size() && t == nullptr; ++f) {
        if (schema[f].name == e.fallback) t = model.match.Find(static_cast<int>(f), layer);
      }
    }
    if (t != nullptr) w.slots[e.slot] = MatrixOf(*t, data(*t), /*stack=*/false, 0);
  }
  return w;
}

void RunUnit(const Architecture& arch, Backend& be, const StepContext& s, const UnitWeights& w,
             std::span<const KvLayer> kv, int64_t first_row, Activations& act) {
  switch (w.kind) {
    case UnitKind::kEmbd:
      arch.Embed(be, s, w, act);
      return;
    case UnitKind::kAttn:
      arch.Attention(be, s, w, kv, act);
      return;
    case UnitKind::kFfn:
      arch.Ffn(be, s, w, act);
      return;
    case UnitKind::kOutput:
      arch.Output(be, s, w, first_row, act);
      return;
  }
}

}  // namespace tandem
