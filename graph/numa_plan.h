// Where the weights live on a multi-socket machine, and which threads run them (--numa auto|off|interleave|shard).
// PlanNuma is a pure function of the topology and the tensor list; ApplyNumaPlan is the one place that acts on a
// plan (binds pages, pins threads), called once at startup.
//
// shard: every expert of every layer lives on exactly one node and is run by that node's threads, so experts are
// never replicated; dense tensors are split by rows across nodes in proportion to their cores, in row ranges
// aligned to 16 rows. interleave: pages of every tensor are spread over all nodes. off: no binding.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/arch.h"
#include "core/gguf.h"
#include "core/topology.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/numa_memory.h"

namespace tandem {

enum class NumaPolicy { kAuto, kOff, kInterleave, kShard };

absl::StatusOr<NumaPolicy> ParseNumaPolicy(std::string_view name);  // "auto", "off", "interleave", "shard"
std::string_view NumaPolicyName(NumaPolicy p);

// One weight tensor as the planner sees it.
struct WeightTensor {
  std::string name;
  uint64_t bytes = 0;    // all of it (all experts for an expert tensor)
  int64_t rows = 1;      // rows of one matrix: ne1*ne2*ne3 for dense, ne1 for one expert's matrix
  int layer = -1;        // N of "blk.N.", -1 for token_embd/output
  int n_experts = 0;     // > 0: `bytes` holds n_experts equal slices, slice i being expert first_expert + i
  int first_expert = 0;  // per-expert files (blk.N.ffn_up.E.weight) have n_experts = 1, first_expert = E
  bool is_expert() const { return n_experts > 0; }
};

// The planner's view of a model's tensors, from its family's schema: expert stacks hold n_expert slices, and a
// per-expert tensor is one expert's.
std::vector<WeightTensor> WeightTensorsOf(const ModelSchema& model);
// The same for a tensor table of cfg's family, tensor by tensor (it need not be a whole model).
std::vector<WeightTensor> WeightTensorsOf(std::span<const GgufTensorInfo> tensors, const ModelConfig& cfg);

// Where one byte range of one tensor lives.
struct NumaPlacement {
  int tensor = 0;                      // index into NumaPlan::tensors
  int expert = -1;                     // expert id of an expert slice; -1 for a dense row range
  int64_t row_begin = 0, row_end = 0;  // rows of the matrix (of that expert's matrix for a slice)
  uint64_t offset = 0, bytes = 0;      // byte range within the tensor
  int node = 0;                        // index into Topology::nodes(); kInterleavedNode when pages are spread
};

struct NumaWorker {
  int node = 0;  // index into Topology::nodes()
  int core = 0;  // TopoCore::logical_index
  int pu = 0;    // os index of the PU it is pinned to (the core's first hardware thread)
};

struct NumaNodeShare {
  int first_thread = 0;  // this node's workers are threads [first_thread, first_thread + n_threads)
  int n_threads = 0;
  uint64_t bytes = 0;    // weight bytes placed here (0 for every node under interleave)
};

struct NumaPlan {
  NumaPolicy policy = NumaPolicy::kOff;  // resolved: never kAuto
  std::vector<WeightTensor> tensors;
  // Sorted by tensor, then offset; together they cover every byte of every tensor exactly once.
  std::vector<NumaPlacement> placements;
  std::vector<NumaWorker> workers;  // OpenMP thread i is workers[i]; grouped by node, in topology order
  std::vector<NumaNodeShare> nodes;  // one per Topology::nodes() entry
  std::map<std::pair<int, int>, int> expert_nodes;  // (layer, expert) -> node, under shard

  std::vector<int> WorkerPus() const;
  // The node that holds (and runs) an expert under shard; -1 otherwise.
  int ExpertNode(int layer, int expert) const;
};

struct NumaPlanOptions {
  NumaPolicy policy = NumaPolicy::kAuto;
  int max_threads = 0;  // 0: one worker per physical core; fewer are taken round-robin across nodes
  int row_align = 16;   // dense row ranges start on multiples of this
};

// kAuto resolves to kShard when more than one node has both cores and memory, else kOff.
absl::StatusOr<NumaPlan> PlanNuma(const Topology& topo, std::vector<WeightTensor> tensors,
                                  const NumaPlanOptions& opts = {});

// The ranges to bind: one per placement under shard and interleave, none under off. Tensors are found in
// `file` by name.
absl::StatusOr<std::vector<MemoryRegion>> NumaMemoryRegions(const NumaPlan& plan, const GgufFile& file);

// The placement of a CPU-side copy of one matrix (the CPU backend's repacked weights, repack.h): `original` views
// the file, whose pages went to `file_regions` (NumaMemoryRegions); the copy at `copy` holds the same rows in
// groups of `group_rows` rows, `group_bytes` each. Each group goes where its rows went in the file, so a shard
// plan's experts stay whole on their node and dense row ranges keep their split.
std::vector<MemoryRegion> CopyRegions(std::span<const MemoryRegion> file_regions, const WeightMatrix& original,
                                      const void* copy, int64_t group_rows, size_t group_bytes);
// Binds the file's pages as planned, then pins the OpenMP workers. `topo` must be the host's.
absl::StatusOr<MembindReport> ApplyNumaPlan(const Topology& topo, const NumaPlan& plan, const GgufFile& file,
                                            const MembindOptions& opts = {});

}  // namespace tandem
