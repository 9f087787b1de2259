// tandem inspect MODEL [--json]: metadata, hyperparameters, every tensor, and bytes per layer and group.
// The file is validated exactly as a load does before anything is printed, so an invalid file prints only the
// one error line.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "core/gguf.h"
#include "arch/arch.h"
#include "arch/model_config.h"
#include "arch/summary.h"
#include "core/status.h"
#include "core/tokenizer.h"
#include "graph/engine.h"
#include "nlohmann/json.hpp"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace tandem::cli {
namespace {

using nlohmann::json;

constexpr const char* kUsage = R"(usage: tandem inspect MODEL [--json]

Shows a GGUF file's metadata, architecture and hyperparameters, every tensor (name, type, shape in ggml order,
bytes, file offset) and the bytes per layer and per group (embeddings, attention, dense FFN, experts, output).
The file is validated as a load would (hyperparameters, tensors, and a tokenizer tandem can run); an invalid
file is one `error:` line and exit status 1. A vocab-only file (no tensors) shows its metadata, its tokenizer
checked as `tokenize` would run it.

options:
  -m, --model MODEL  the file (may also be given as the only positional argument)
  --json             print one JSON object instead of text
  -h, --help         show this help
)";

constexpr size_t kShownArrayItems = 8;

json ScalarJson(const GgufValue& v) {
  if (const std::string* s = v.AsString()) return *s;
  if (v.type == GgufType::kBool) return v.AsUint().value_or(0) != 0;
  if (const double* d = std::get_if<double>(&v.v)) return *d;  // NaN/inf become null
  if (const int64_t* i = std::get_if<int64_t>(&v.v)) return *i;
  if (const uint64_t* u = std::get_if<uint64_t>(&v.v)) return *u;
  return nullptr;
}

// Arrays become {elem_type, count, items (the first few)} so a 32000-token vocab stays readable.
json ValueJson(const GgufValue& v) {
  const GgufArray* a = v.AsArray();
  if (!a) return ScalarJson(v);
  json items = json::array();
  for (size_t i = 0; i < a->items.size() && i < kShownArrayItems; ++i) items.push_back(ValueJson(a->items[i]));
  return json{{"elem_type", GgufTypeName(a->elem_type)}, {"count", a->items.size()}, {"items", std::move(items)}};
}

// Text from the file, safe for a terminal: control bytes become \xNN, long strings are cut.
std::string Printable(std::string_view s, size_t max_len = 120) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

std::string ValueText(const GgufValue& v) {
  const GgufArray* a = v.AsArray();
  if (!a) {
    if (const std::string* s = v.AsString()) return Cat("\"", Printable(*s), "\"");
    if (v.type == GgufType::kFloat32) return Cat(static_cast<float>(*v.AsFloat()));  // 1e-05, not 9.99999975e-06
    return ScalarJson(v).dump(-1, ' ', false, json::error_handler_t::replace);
  }
  std::string out = Cat("[", a->items.size(), " x ", GgufTypeName(a->elem_type), "]");
  for (size_t i = 0; i < a->items.size() && i < kShownArrayItems; ++i)
    out += Cat(i ? ", " : " ", ValueText(a->items[i]));
  if (a->items.size() > kShownArrayItems) out += ", ...";
  return out;
}

std::string Shape(const GgufTensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += Cat(d ? ", " : "", t.ne[d]);
  return s + "]";
}

std::string HumanBytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / 1073741824.0);
  if (b >= (uint64_t{1} << 20)) return absl::StrFormat("%.2f MiB", b / 1048576.0);
  if (b >= (uint64_t{1} << 10)) return absl::StrFormat("%.2f KiB", b / 1024.0);
  return Cat(b, " B");
}

json HparamsJson(const ModelConfig& c) {
  const Architecture* family = FindArchitecture(c.arch);
  return json{{"arch", c.arch},
              {"family", family != nullptr ? std::string(family->family()) : ""},
              {"name", c.name},
              {"n_layer", c.n_layer},
              {"n_embd", c.n_embd},
              {"n_ff", c.n_ff},
              {"n_ff_expert", c.is_moe() ? c.n_ff_expert : 0},
              {"n_ff_shexp", c.n_ff_shexp},
              {"n_head", c.n_head},
              {"n_head_kv", c.n_head_kv},
              {"head_dim", c.head_dim},
              {"n_rot", c.n_rot},
              {"n_ctx_train", c.n_ctx_train},
              {"n_vocab", c.n_vocab},
              {"n_expert", c.n_expert},
              {"n_expert_used", c.n_expert_used},
              {"rms_eps", c.rms_eps},
              {"rope_freq_base", c.rope_freq_base},
              {"rope_freq_scale", c.rope_freq_scale},
              {"rope_scaling", c.rope_ext_factor != 0 ? "yarn" : c.rope_freq_scale != 1.0f ? "linear" : "none"},
              {"rope_n_ctx_orig", c.rope_n_ctx_orig},
              {"tied_output", c.tied_output},
              {"legacy_experts", c.legacy_experts},
              {"bos_id", c.bos_id},
              {"eos_id", c.eos_id}};
}

json GroupsJson(const GroupBytes& g) {
  json j = json::object();
  for (int i = 0; i < kNumTensorGroups; ++i) {
    const TensorGroup tg = static_cast<TensorGroup>(i);
    j[std::string(TensorGroupName(tg))] = g[tg];
  }
  return j;
}

void PrintJson(const GgufFile& f, const ModelConfig* cfg, const ModelSummary& s) {
  json meta = json::object(), meta_types = json::object();
  for (const GgufKV& kv : f.metadata()) {
    meta[kv.key] = ValueJson(kv.value);
    meta_types[kv.key] = GgufTypeName(kv.value.type);
  }
  json tensors = json::array();
  for (const GgufTensorInfo& t : f.tensors()) {
    json shape = json::array();
    for (int d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
    tensors.push_back(json{{"name", t.name},
                           {"type", DTypeName(t.type)},
                           {"shape", std::move(shape)},
                           {"bytes", t.nbytes},
                           {"offset", f.data_offset() + t.offset}});
  }
  json layers = json::array();
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSummary& L = s.layers[l];
    json lj = GroupsJson(L.groups);
    lj["layer"] = l;
    lj["total"] = L.total();
    lj["norm_bytes"] = L.norm_bytes;
    lj["router_bytes"] = L.router_bytes;
    lj["n_expert"] = L.n_expert;
    lj["bytes_per_expert"] = L.bytes_per_expert();
    layers.push_back(std::move(lj));
  }
  json out = {{"file", f.path()},
              {"file_size", f.file_size()},
              {"gguf_version", f.version()},
              {"alignment", f.alignment()},
              {"data_offset", f.data_offset()},
              {"vocab_only", f.tensors().empty()},
              {"metadata", std::move(meta)},
              {"metadata_types", std::move(meta_types)},
              {"hparams", cfg ? HparamsJson(*cfg) : json(nullptr)},
              {"tensors", std::move(tensors)},
              {"groups", GroupsJson(s.totals)},
              {"layers", std::move(layers)},
              {"n_params", s.n_params},
              {"total_bytes", s.total_bytes}};
  // Strings from the file need not be UTF-8: replace bad bytes instead of throwing.
  std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
}

void PrintText(const GgufFile& f, const ModelConfig* cfg, const ModelSummary& s) {
  std::printf("file: %s (%" PRIu64 " bytes, GGUF v%u, alignment %" PRIu64 ", data at byte %" PRIu64 ")\n",
              f.path().c_str(), f.file_size(), f.version(), f.alignment(), f.data_offset());
  if (cfg) {
    const ModelConfig& c = *cfg;
    const Architecture* family = FindArchitecture(c.arch);
    std::printf("architecture: %s, family %s%s%s%s\n", c.arch.c_str(),
                family != nullptr ? std::string(family->family()).c_str() : "?", c.name.empty() ? "" : " (",
                Printable(c.name).c_str(), c.name.empty() ? "" : ")");
    std::printf("hyperparameters:\n");
    std::printf("  n_layer %d, n_embd %d, n_ff %d, n_vocab %d, n_ctx_train %d\n", c.n_layer, c.n_embd,
                c.is_moe() ? c.n_ff_expert : c.n_ff, c.n_vocab, c.n_ctx_train);
    std::printf("  n_head %d, n_head_kv %d, head_dim %d, n_rot %d\n", c.n_head, c.n_head_kv, c.head_dim, c.n_rot);
    std::printf("  rms_eps %g, rope_freq_base %g, rope_freq_scale %g%s\n", c.rms_eps, c.rope_freq_base,
                c.rope_freq_scale,
                c.rope_ext_factor != 0 ? Cat(", YaRN over ", c.rope_n_ctx_orig, " original positions").c_str() : "");
    if (c.is_moe()) {
      std::printf("  experts %d of width %d, used per token %d%s\n", c.n_expert, c.n_ff_expert, c.n_expert_used,
                  c.legacy_experts ? " (per-expert tensors)" : " (merged tensors)");
      if (c.n_ff_shexp > 0) std::printf("  a shared expert of width %d\n", c.n_ff_shexp);
    } else {
      std::printf("  dense FFN (no experts)\n");
    }
    std::printf("  output head %s, bos %d, eos %d\n", c.tied_output ? "tied to the token embeddings" : "separate", c.bos_id,
                c.eos_id);
  } else {
    const GgufValue* arch = f.Find("general.architecture");
    std::printf("architecture: %s\n", arch && arch->AsString() ? Printable(*arch->AsString()).c_str() : "(none)");
    std::printf("vocab only: the file has no tensors, so there are no hyperparameters to check\n");
  }

  std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
  for (const GgufKV& kv : f.metadata()) {
    std::printf("  %-44s %-8s %s\n", Printable(kv.key).c_str(), std::string(GgufTypeName(kv.value.type)).c_str(),
                ValueText(kv.value).c_str());
  }
  if (f.tensors().empty()) return;

  std::printf("\ntensors (%zu):\n", f.tensors().size());
  std::printf("  %-32s %-5s %-20s %12s %12s\n", "name", "type", "shape", "bytes", "offset");
  for (const GgufTensorInfo& t : f.tensors()) {
    std::printf("  %-32s %-5s %-20s %12" PRIu64 " %12" PRIu64 "\n", Printable(t.name).c_str(),
                std::string(DTypeName(t.type)).c_str(), Shape(t).c_str(), t.nbytes, f.data_offset() + t.offset);
  }

  std::printf("\nbytes per layer:\n");
  std::printf("  %5s %12s %12s %12s %12s %14s\n", "layer", "attention", "dense_ffn", "experts", "total", "per expert");
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSummary& L = s.layers[l];
    std::printf("  %5zu %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %14" PRIu64 "\n", l,
                L.groups[TensorGroup::kAttention], L.groups[TensorGroup::kDenseFfn], L.groups[TensorGroup::kExperts],
                L.total(), L.bytes_per_expert());
  }
  std::printf("\nbytes per group (norms count with their unit, the router with the experts):\n");
  for (int i = 0; i < kNumTensorGroups; ++i) {
    const TensorGroup g = static_cast<TensorGroup>(i);
    if (g == TensorGroup::kOther && s.totals[g] == 0) continue;
    std::printf("  %-12s %14" PRIu64 "  (%s)\n", std::string(TensorGroupName(g)).c_str(), s.totals[g],
                HumanBytes(s.totals[g]).c_str());
  }
  std::printf("  %-12s %14" PRIu64 "  (%s, %" PRIu64 " parameters)\n", "total", s.total_bytes,
              HumanBytes(s.total_bytes).c_str(), s.n_params);
}

}  // namespace

int CmdInspect(std::span<const std::string> args) {
  ArgReader ar(args);
  std::optional<std::string> model;
  bool as_json = false;
  while (!ar.Done()) {
    const std::string& a = ar.Next();
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--json") {
      as_json = true;
    } else if (a == "-m" || a == "--model") {
      absl::StatusOr<std::string> v = ar.Value(a);
      if (!v.ok()) return Fail(v.status());
      if (model) return Fail("inspect: more than one MODEL given");
      model = *v;
    } else if (!a.empty() && a[0] == '-') {
      return Fail(Cat("inspect: unknown flag '", a, "' (see tandem inspect --help)"));
    } else {
      if (model) return Fail(Cat("inspect: more than one MODEL given ('", *model, "' and '", a, "')"));
      model = a;
    }
  }
  if (!model) return Fail("inspect: missing MODEL (usage: tandem inspect MODEL [--json])");

  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(*model);
  if (!file.ok()) return Fail(file.status());
  const GgufFile& f = **file;
  std::optional<ModelConfig> cfg;
  if (!f.tensors().empty()) {
    absl::StatusOr<CheckedModel> checked = CheckModelFile(f);
    if (!checked.ok()) return Fail(Cat(*model, ": ", checked.status().message()));
    cfg = std::move(checked->model.cfg);
  } else if (f.Find("tokenizer.ggml.model") != nullptr) {
    // A vocab-only file: nothing to check a config against, but `tokenize` runs its tokenizer.
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(f);
    if (!tok.ok()) return Fail(Cat(*model, ": ", tok.status().message()));
  }
  const ModelSummary summary = SummarizeModel(f, cfg ? &*cfg : nullptr);
  if (as_json) {
    PrintJson(f, cfg ? &*cfg : nullptr, summary);
  } else {
    PrintText(f, cfg ? &*cfg : nullptr, summary);
  }
  return 0;
}

}  // namespace tandem::cli
