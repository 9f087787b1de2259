// A Plan: for every placement unit and phase, where it runs and where its weights live; plus the memory account
// per device and the predicted cost. Made by the partitioner (a pure function), run by the executor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/schema.h"

namespace tandem {

enum class Phase { kPrefill = 0, kDecode = 1 };

// Where a unit runs, and where its weights live. kCpu: on the host CPU, from the file's pages (or the CPU's own
// copy of them); weights never cross PCIe. kGpu: on an accelerator, weights resident in its memory. kStream: on an
// accelerator, weights copied from pinned RAM into a staging buffer just before use. Which accelerator is the
// unit's `device` (Plan::devices).
enum class Placement { kCpu = 0, kGpu = 1, kStream = 2 };
const char* PlacementName(Placement p);  // "cpu", "gpu", "stream"
// True for placements that run on an accelerator (gpu and stream).
inline bool GpuSide(Placement p) { return p != Placement::kCpu; }

// One routed expert of an MoE layer placed on its own (UnitPlan::experts): per phase cpu (computed by the host CPU
// from its pages), gpu (resident on the unit's accelerator) or stream (copied to the accelerator when the router
// picks it).
struct ExpertPlacement {
  Placement prefill = Placement::kCpu;
  Placement decode = Placement::kCpu;
  Placement at(Phase ph) const { return ph == Phase::kPrefill ? prefill : decode; }
  bool operator==(const ExpertPlacement&) const = default;
};

struct UnitPlan {
  std::string name;             // "embd", "blk.3.attn", "blk.3.ffn", "output"
  UnitKind kind = UnitKind::kAttn;
  int layer = -1;               // -1 for embd/output
  Placement prefill = Placement::kCpu;
  Placement decode = Placement::kCpu;
  // The accelerator (an index into Plan::devices, >= 1) of the phases placed gpu or stream; 0 when both are cpu.
  int device = 0;
  uint64_t weight_bytes = 0;    // bytes of this unit's tensors
  std::vector<std::string> tensors;  // GGUF tensor names in this unit
  uint64_t kv_bytes = 0;             // attention units: this layer's K+V cache (n_ctx rows); on the unit's
                                     // accelerator when it is GPU-side (gpu or stream), else in host RAM
  // MoE FFN units placed expert by expert: [e] for each routed expert. The unit's own placement is then that of
  // its router, norm and shared experts, and in a phase where that is cpu every expert is cpu too (routing stays
  // on the device that computes it; the accelerator hands the CPU its experts' rows). Empty: the experts follow
  // the unit, and a streamed unit copies all of them.
  std::vector<ExpertPlacement> experts;
  uint64_t expert_block_bytes = 0;   // one expert's matrices packed as the executor packs them
  // The share of routed (token, expert) picks that land on a GPU-side expert in decode, expected from the
  // routing statistics the plan was made with (uniform routing when none).
  double expected_gpu_hit_rate = 0;
  double predicted_prefill_s = 0;    // per prefill batch of Plan::prefill_batch tokens
  double predicted_decode_s = 0;     // per decoded token
  Placement at(Phase ph) const { return ph == Phase::kPrefill ? prefill : decode; }
  // The GPU side holds this unit's weights resident (in either phase).
  bool resident() const { return prefill == Placement::kGpu || decode == Placement::kGpu; }
  bool split() const { return !experts.empty(); }
  int CountExperts(Phase ph, Placement p) const {
    int n = 0;
    for (const ExpertPlacement& e : experts) n += e.at(ph) == p;
    return n;
  }
};

// One device's memory. On an accelerator: weights are the resident units' blocks. On the host: weights are the
// pinned copies streamed units are copied from, and `mapped` and `repacked` what the CPU computes with.
struct MemoryAccount {
  uint64_t weights = 0;
  // Host only. The model file's pages the CPU reads in place: page cache, so when RAM runs short they are read
  // again from disk rather than swapped.
  uint64_t mapped = 0;
  // Host only. The CPU backend's repacked copies of the matrices it computes with (their pages are released).
  uint64_t repacked = 0;
  uint64_t kv = 0;
  uint64_t staging = 0;
  uint64_t activations = 0;
  uint64_t workspace = 0;
  uint64_t total() const { return weights + mapped + repacked + kv + staging + activations + workspace; }
  // What cannot be paged back from the model file: swapped, or the process killed, when it does not fit.
  uint64_t anonymous() const { return total() - mapped; }
};

struct Plan {
  std::vector<UnitPlan> units;  // embd, then per layer attn, ffn, then output
  // The devices the plan names: [0] is the host CPU ("cpu"), then the accelerators ("sim:12GiB", "cuda:0").
  std::vector<std::string> devices = {"cpu"};
  bool has_gpu = false;         // an accelerator exists in this plan
  uint64_t vram_budget = 0;     // bytes, per accelerator; 0 when there is none
  MemoryAccount gpu;            // VRAM, all accelerators together
  std::vector<MemoryAccount> device_accounts;  // [device]: each accelerator's own ([0], the host's, stays empty)
  MemoryAccount host;           // RAM: pinned sources of streamed units, the file's pages and repacked copies the
                                // CPU computes with, KV on the CPU, activations
  bool cpu_repack = false;      // the CPU computes from repacked copies of the matrices it can repack
  uint64_t host_ram_available = 0;  // RAM the account was held against (MemAvailable or --host-ram); 0: unknown
  // Mapped weights that do not fit in host_ram_available: read from disk again as decode touches them.
  uint64_t host_paged_bytes = 0;
  double disk_read_gbps = 0;        // the rate paged weights were predicted at (MachineProfile::disk_read_gbps)
  uint64_t disk_bytes_per_decode_token = 0;  // of the weights decode reads, those that come from disk
  uint64_t staging_slot_bytes = 0;  // size of EACH of the two staging buffers (the largest streamed unit); 0: none
  // Per accelerator, one buffer for the routed experts of one streamed MoE layer: the most distinct streamed
  // experts one batch can route to (top-k in decode, up to every streamed expert in prefill), packed.
  uint64_t expert_staging_bytes = 0;
  // --expert-cache: decode keeps streamed experts in an LRU cache of this many bytes per accelerator, so that an
  // expert routed again is not copied again (slots of the largest streamed expert's block); 0: none.
  uint64_t expert_cache_bytes = 0;
  int expert_cache_slots = 0;
  double expected_cache_hit_rate = 0;  // of decode's picks of streamed experts, those the cache is expected to hold
  int kv_elem_bytes = 2;        // bytes per cached K/V element the account assumed (2: F16)
  std::string device;           // the accelerators planned for, joined by '+' ("sim:12GiB", "cuda:0"), or "none"
  int prompt_tokens = 0;        // the expected mix auto placement minimised the time of
  int gen_tokens = 0;
  int n_ctx = 0;
  int n_seq = 1;  // KV sequences the accounts hold, each of n_ctx rows
  int prefill_batch = 0;
  int n_threads = 1;
  double predicted_prefill_tps = 0;
  double predicted_decode_tps = 0;
  double predicted_ttft_s = 0;  // the whole prompt of prompt_tokens, through prefill to its first token
  uint64_t pcie_bytes_per_prefill_token = 0;
  uint64_t pcie_bytes_per_decode_token = 0;
  std::string why;              // one line: how the placement was chosen ("auto: ...", "--gpu-layers 2 ...")
  bool rates_measured = false;  // the predictions rest on a calibration of this machine, not on default rates
  double profile_others_cpu_share = 0;  // MachineProfile::others_cpu_share of the profile the plan rests on
  // One line each, for stderr: what will make this plan slow or unsafe (paging from disk, a context past the one
  // the model was trained for, memory that will swap).
  std::vector<std::string> warnings;
};

}  // namespace tandem
