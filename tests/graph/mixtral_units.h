// A Mixtral-8x7B-shaped tensor table (no data: names, shapes, types, bytes) and synthetic machine profiles, for
// partitioner and cost-model tests that need real sizes without a 26 GB file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"
#include "arch/model_config.h"
#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "graph/calibrate.h"
#include "graph/partitioner.h"
#include "graph/profile.h"
#include "sim_backend/sim_backend.h"

namespace tandem::test {

inline ModelConfig MixtralConfig() {
  ModelConfig c;
  c.arch = "llama";
  c.name = "mixtral-8x7b-shape";
  c.n_layer = 32;
  c.n_embd = 4096;
  c.n_ff = 14336;
  c.n_ff_expert = 14336;
  c.n_head = 32;
  c.n_head_kv = 8;
  c.head_dim = 128;
  c.n_rot = 128;
  c.n_ctx_train = 32768;
  c.n_vocab = 32000;
  c.n_expert = 8;
  c.n_expert_used = 2;
  return c;
}

inline GgufTensorInfo TensorOf(std::string name, DType type, std::initializer_list<int64_t> shape) {
  GgufTensorInfo t;
  t.name = std::move(name);
  t.type = type;
  t.n_dims = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t d : shape) t.ne[i++] = d;
  t.nbytes = RowBytes(type, t.ne[0]) * static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
  return t;
}

// The tensors of a llama-family model with the config's shapes: matrices in `mtype`, norms and router in F32.
inline std::vector<GgufTensorInfo> ModelTensors(const ModelConfig& c, DType mtype) {
  std::vector<GgufTensorInfo> t;
  const int64_t e = c.n_embd, kv = c.n_embd_kv(), ff = c.n_ff;
  t.push_back(TensorOf("token_embd.weight", mtype, {e, c.n_vocab}));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = Cat("blk.", l, ".");
    t.push_back(TensorOf(b + "attn_norm.weight", DType::kF32, {e}));
    t.push_back(TensorOf(b + "attn_q.weight", mtype, {e, e}));
    t.push_back(TensorOf(b + "attn_k.weight", mtype, {e, kv}));
    t.push_back(TensorOf(b + "attn_v.weight", mtype, {e, kv}));
    t.push_back(TensorOf(b + "attn_output.weight", mtype, {e, e}));
    t.push_back(TensorOf(b + "ffn_norm.weight", DType::kF32, {e}));
    if (c.n_expert > 0) {
      t.push_back(TensorOf(b + "ffn_gate_inp.weight", DType::kF32, {e, c.n_expert}));
      t.push_back(TensorOf(b + "ffn_gate_exps.weight", mtype, {e, ff, c.n_expert}));
      t.push_back(TensorOf(b + "ffn_up_exps.weight", mtype, {e, ff, c.n_expert}));
      t.push_back(TensorOf(b + "ffn_down_exps.weight", mtype, {ff, e, c.n_expert}));
    } else {
      t.push_back(TensorOf(b + "ffn_gate.weight", mtype, {e, ff}));
      t.push_back(TensorOf(b + "ffn_up.weight", mtype, {e, ff}));
      t.push_back(TensorOf(b + "ffn_down.weight", mtype, {ff, e}));
    }
  }
  t.push_back(TensorOf("output_norm.weight", DType::kF32, {e}));
  t.push_back(TensorOf("output.weight", mtype, {e, c.n_vocab}));
  return t;
}

// A CPU of `gemv_gbps` memory bandwidth and `gemm_gflops` matmul throughput for every type.
inline MachineProfile CpuProfile(double gemv_gbps, double gemm_gflops) {
  MachineProfile p = DefaultProfile(false);
  p.device = "test-cpu";
  p.n_threads = 8;
  for (auto& [type, rate] : p.cpu_gemv_gbps) rate = gemv_gbps;
  for (auto& [type, rate] : p.cpu_gemm_gflops) rate = gemm_gflops;
  p.cpu_attn_gflops = gemm_gflops / 4;
  p.cpu_op_overhead_s = 5e-6;
  return p;
}

// Partition input for the Mixtral shape on a simulated device ("none" for no GPU).
inline PartitionInput MixtralInput(std::string_view device, const MachineProfile& cpu) {
  PartitionInput in;
  in.config = MixtralConfig();
  const std::vector<GgufTensorInfo> tensors = ModelTensors(in.config, DType::kQ4_K);
  in.units = BuildUnits(in.config, tensors).value();
  in.n_ctx = 4096;
  in.prefill_batch = 512;
  in.prompt_tokens = 512;
  in.gen_tokens = 128;
  in.n_threads = 8;
  if (device == "none") {
    in.profile = cpu;
    return in;
  }
  const SimOptions sim = ParseSimSpec(device).value();
  in.profile = SimProfile(cpu, sim);
  in.devices = {DeviceDesc{.name = sim.spec, .capacity = sim.capacity, .supports = SimSupports}};
  return in;
}

}  // namespace tandem::test
