// A Plan for people (a table) and for machines (JSON): shared by `tandem plan` and the `plan` field of
// `tandem run --json` / `tandem bench -o json`.
#pragma once

#include <string>

#include "graph/plan.h"
#include "nlohmann/json.hpp"

namespace tandem {

// {device, why, vram_budget, n_ctx, prefill_batch, n_threads, prompt_tokens, gen_tokens,
//  units: [{name, kind, layer, prefill, decode, weight_bytes, kv_bytes, predicted_prefill_ms,
//           predicted_decode_ms, tensors}],
//  memory: {gpu: {weights, mapped, repacked, kv, staging, activations, workspace, total}, host: {...},
//          staging_slot_bytes, cpu_repack, host_ram_available, host_paged_bytes, disk_read_gbps,
//          disk_bytes_per_decode_token},
//  predicted: {prefill_tps, decode_tps}, pcie_bytes_per_token: {prefill, decode}, warnings: [one line each]}
nlohmann::json PlanJson(const Plan& plan, bool with_tensors = false);

// The placement table per unit and phase, the memory per device, predicted tokens/s and PCIe bytes per token.
std::string PlanTable(const Plan& plan);

}  // namespace tandem
