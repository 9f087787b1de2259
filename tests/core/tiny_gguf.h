// A tiny, valid llama/Mixtral-shaped GGUF built in memory with the writer: the base that the config and
// hostile-input tests mutate. Tensor data is a deterministic pattern, not trained weights.
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/status.h"

namespace tandem::test {

struct TinySpec {
  int n_layer = 2;
  int n_embd = 32;
  int n_ff = 64;
  int n_head = 4;
  int n_head_kv = 2;
  int n_vocab = 40;
  int n_expert = 0;  // > 0 makes a Mixtral-style MoE
  int n_expert_used = 0;
  bool legacy_experts = false;      // per-expert blk.N.ffn_gate.E.weight instead of merged ffn_gate_exps
  bool tied_output = false;         // no output.weight
  bool with_vocab = true;           // tokenizer.ggml.tokens/scores/token_type
  DType weight_type = DType::kF32;  // matrices; norms and router stay F32
};

struct TinyTensor {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 1;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  std::vector<uint8_t> data;
};

struct TinyModel {
  std::vector<GgufKV> metadata;
  std::vector<TinyTensor> tensors;

  GgufValue* Key(const std::string& key) {
    for (GgufKV& kv : metadata) {
      if (kv.key == key) return &kv.value;
    }
    return nullptr;
  }
  void SetKey(const std::string& key, GgufValue v) {
    if (GgufValue* old = Key(key)) {
      *old = std::move(v);
    } else {
      metadata.push_back({key, std::move(v)});
    }
  }
  void EraseKey(const std::string& key) {
    std::erase_if(metadata, [&](const GgufKV& kv) { return kv.key == key; });
  }
  TinyTensor* Tensor(const std::string& name) {
    for (TinyTensor& t : tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  void EraseTensor(const std::string& name) {
    std::erase_if(tensors, [&](const TinyTensor& t) { return t.name == name; });
  }
  // Adds or replaces a tensor with pattern data of the right size.
  void SetTensor(const std::string& name, DType type, std::vector<int64_t> shape);

  std::vector<GgufWriteTensor> WriteList() const {
    std::vector<GgufWriteTensor> out;
    for (const TinyTensor& t : tensors) out.push_back({t.name, t.type, t.n_dims, t.ne, t.data});
    return out;
  }
  std::vector<uint8_t> Bytes(const GgufWriteOptions& opts = {}) const {
    absl::StatusOr<std::vector<uint8_t>> b = SerializeGguf(metadata, WriteList(), opts);
    return b.ok() ? *std::move(b) : std::vector<uint8_t>{};
  }
};

inline TinyTensor MakeTensor(const std::string& name, DType type, std::vector<int64_t> shape) {
  TinyTensor t;
  t.name = name;
  t.type = type;
  t.n_dims = static_cast<int>(shape.size());
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    t.ne[d] = shape[d];
    n *= shape[d];
  }
  const DTypeTraits& tr = Traits(type);
  t.data.resize(static_cast<size_t>(n / tr.block_elems) * tr.block_bytes);
  if (type == DType::kF32) {
    // Small distinct values so overlapping or shifted data would be visible.
    for (size_t i = 0; i < t.data.size() / 4; ++i) {
      const float v = 0.001f * static_cast<float>((i * 37 + name.size()) % 2001) - 1.0f;
      std::memcpy(t.data.data() + 4 * i, &v, 4);
    }
  } else {
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>((i * 131 + name.size()) & 0x3f);
  }
  return t;
}

inline void TinyModel::SetTensor(const std::string& name, DType type, std::vector<int64_t> shape) {
  TinyTensor t = MakeTensor(name, type, std::move(shape));
  if (TinyTensor* old = Tensor(name)) {
    *old = std::move(t);
  } else {
    tensors.push_back(std::move(t));
  }
}

inline TinyModel MakeTinyModel(const TinySpec& s = {}) {
  TinyModel m;
  const int64_t E = s.n_embd, F = s.n_ff, V = s.n_vocab, X = s.n_expert;
  const int64_t hd = s.n_embd / s.n_head, Q = int64_t{s.n_head} * hd, KV = int64_t{s.n_head_kv} * hd;
  m.metadata = {
      {"general.architecture", GgufStr("llama")},
      {"general.name", GgufStr("tiny-test")},
      {"llama.block_count", GgufU32(static_cast<uint32_t>(s.n_layer))},
      {"llama.context_length", GgufU32(256)},
      {"llama.embedding_length", GgufU32(static_cast<uint32_t>(s.n_embd))},
      {"llama.feed_forward_length", GgufU32(static_cast<uint32_t>(s.n_ff))},
      {"llama.attention.head_count", GgufU32(static_cast<uint32_t>(s.n_head))},
      {"llama.attention.head_count_kv", GgufU32(static_cast<uint32_t>(s.n_head_kv))},
      {"llama.rope.dimension_count", GgufU32(static_cast<uint32_t>(hd))},
      {"llama.attention.layer_norm_rms_epsilon", GgufF32(1e-5f)},
  };
  if (X > 0) {
    m.metadata.push_back({"llama.expert_count", GgufU32(static_cast<uint32_t>(X))});
    m.metadata.push_back({"llama.expert_used_count", GgufU32(static_cast<uint32_t>(s.n_expert_used))});
  }
  if (s.with_vocab) {
    std::vector<GgufValue> tokens, scores, types;
    for (int i = 0; i < s.n_vocab; ++i) {
      tokens.push_back(GgufStr(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : "tok" + std::to_string(i)));
      scores.push_back(GgufF32(-static_cast<float>(i)));
      types.push_back(GgufI32(i == 0 ? 2 : i < 3 ? 3 : 1));
    }
    m.metadata.push_back({"tokenizer.ggml.model", GgufStr("llama")});
    m.metadata.push_back({"tokenizer.ggml.tokens", GgufArr(GgufType::kString, std::move(tokens))});
    m.metadata.push_back({"tokenizer.ggml.scores", GgufArr(GgufType::kFloat32, std::move(scores))});
    m.metadata.push_back({"tokenizer.ggml.token_type", GgufArr(GgufType::kInt32, std::move(types))});
    m.metadata.push_back({"tokenizer.ggml.bos_token_id", GgufU32(1)});
    m.metadata.push_back({"tokenizer.ggml.eos_token_id", GgufU32(2)});
  }
  const DType W = s.weight_type;
  m.SetTensor("token_embd.weight", W, {E, V});
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    m.SetTensor(p + "attn_norm.weight", DType::kF32, {E});
    m.SetTensor(p + "attn_q.weight", W, {E, Q});
    m.SetTensor(p + "attn_k.weight", W, {E, KV});
    m.SetTensor(p + "attn_v.weight", W, {E, KV});
    m.SetTensor(p + "attn_output.weight", W, {Q, E});
    m.SetTensor(p + "ffn_norm.weight", DType::kF32, {E});
    if (X == 0) {
      m.SetTensor(p + "ffn_gate.weight", W, {E, F});
      m.SetTensor(p + "ffn_up.weight", W, {E, F});
      m.SetTensor(p + "ffn_down.weight", W, {F, E});
    } else {
      m.SetTensor(p + "ffn_gate_inp.weight", DType::kF32, {E, X});
      if (s.legacy_experts) {
        for (int e = 0; e < X; ++e) {
          m.SetTensor(p + "ffn_gate." + std::to_string(e) + ".weight", W, {E, F});
          m.SetTensor(p + "ffn_up." + std::to_string(e) + ".weight", W, {E, F});
          m.SetTensor(p + "ffn_down." + std::to_string(e) + ".weight", W, {F, E});
        }
      } else {
        m.SetTensor(p + "ffn_gate_exps.weight", W, {E, F, X});
        m.SetTensor(p + "ffn_up_exps.weight", W, {E, F, X});
        m.SetTensor(p + "ffn_down_exps.weight", W, {F, E, X});
      }
    }
  }
  m.SetTensor("output_norm.weight", DType::kF32, {E});
  if (!s.tied_output) m.SetTensor("output.weight", W, {E, V});
  return m;
}

}  // namespace tandem::test
