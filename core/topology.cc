#include "core/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "core/status.h"

namespace tandem {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

// The NUMA node nearest to `obj`: the first memory child of its closest ancestor that has any. A memory-side
// cache sits between an ancestor and its node, so memory children are followed down to the node itself.
hwloc_obj_t LocalNode(hwloc_obj_t obj) {
  for (hwloc_obj_t a = obj; a != nullptr; a = a->parent) {
    if (a->memory_arity == 0) continue;
    hwloc_obj_t m = a->memory_first_child;
    while (m != nullptr && m->type != HWLOC_OBJ_NUMANODE) m = m->memory_first_child;
    if (m != nullptr) return m;
  }
  return nullptr;
}

// "0-7,16-23"
std::string RangeList(const std::vector<int>& sorted) {
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? Cat(sorted[i]) : Cat(sorted[i], "-", sorted[j]);
    i = j + 1;
  }
  return out;
}

int ConfigureNothing(hwloc_topology*, const std::string&) { return 0; }
int ConfigureSynthetic(hwloc_topology* t, const std::string& desc) {
  return hwloc_topology_set_synthetic(t, desc.c_str());
}
int ConfigureXml(hwloc_topology* t, const std::string& path) { return hwloc_topology_set_xml(t, path.c_str()); }

}  // namespace

absl::StatusOr<std::unique_ptr<Topology>> Topology::Host() { return Load("host", ConfigureNothing, ""); }

absl::StatusOr<std::unique_ptr<Topology>> Topology::Synthetic(std::string_view description) {
  if (description.empty()) return InvalidArgument("empty synthetic topology description");
  return Load(Cat("synthetic:", description), ConfigureSynthetic, std::string(description));
}

absl::StatusOr<std::unique_ptr<Topology>> Topology::FromXmlFile(const std::string& path) {
  return Load(Cat("xml:", path), ConfigureXml, path);
}

absl::StatusOr<std::unique_ptr<Topology>> Topology::Load(std::string source,
                                                         int (*configure)(hwloc_topology*, const std::string&),
                                                         const std::string& arg) {
  std::unique_ptr<Topology> t(new Topology());
  t->source_ = std::move(source);
  if (hwloc_topology_init(&t->topo_) != 0) {
    t->topo_ = nullptr;
    return ResourceExhausted("hwloc_topology_init failed: ", ErrnoText());
  }
  if (configure(t->topo_, arg) != 0) {
    return InvalidArgument("hwloc rejected topology ", t->source_, ": ", ErrnoText());
  }
  if (hwloc_topology_load(t->topo_) != 0) {
    return InvalidArgument("hwloc could not load topology ", t->source_, ": ", ErrnoText());
  }
  t->this_system_ = hwloc_topology_is_thissystem(t->topo_) != 0;
  TANDEM_RETURN_IF_ERROR(t->Extract());
  return t;
}

Topology::~Topology() {
  if (topo_ != nullptr) hwloc_topology_destroy(topo_);
}

absl::Status Topology::Extract() {
  n_packages_ = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_PACKAGE);
  if (hwloc_obj_t pkg = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, 0); pkg != nullptr) {
    if (const char* model = hwloc_obj_get_info_by_name(pkg, "CPUModel"); model != nullptr) cpu_model_ = model;
  }
  std::map<hwloc_obj_t, size_t> node_index;
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, n)) != nullptr;) {
    TopoNumaNode node;
    node.os_index = n->os_index == HWLOC_UNKNOWN_INDEX ? static_cast<int>(n->logical_index)
                                                       : static_cast<int>(n->os_index);
    node.memory_bytes = n->attr != nullptr ? n->attr->numanode.local_memory : 0;
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, n);
    node.package = pkg != nullptr ? static_cast<int>(pkg->logical_index) : -1;
    node_index[n] = nodes_.size();
    nodes_.push_back(std::move(node));
  }
  if (nodes_.empty()) return DataLoss("topology ", source_, " has no NUMA node");

  // Some topologies (XML from odd platforms) have PUs but no Core objects: then every PU counts as a core.
  const hwloc_obj_type_t core_type =
      hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  for (hwloc_obj_t c = nullptr; (c = hwloc_get_next_obj_by_type(topo_, core_type, c)) != nullptr;) {
    if (c->cpuset == nullptr || hwloc_bitmap_iszero(c->cpuset)) continue;
    TopoCore core;
    core.logical_index = static_cast<int>(c->logical_index);
    int pu;
    hwloc_bitmap_foreach_begin(pu, c->cpuset) { core.pus.push_back(pu); }
    hwloc_bitmap_foreach_end();
    const hwloc_obj_t local = LocalNode(c);
    const auto it = node_index.find(local);
    if (it == node_index.end()) return DataLoss("core L#", c->logical_index, " of ", source_, " has no NUMA node");
    nodes_[it->second].cores.push_back(std::move(core));
  }
  if (n_cores() == 0) return DataLoss("topology ", source_, " has no usable core");
  return absl::OkStatus();
}

int Topology::n_cores() const {
  int n = 0;
  for (const TopoNumaNode& node : nodes_) n += static_cast<int>(node.cores.size());
  return n;
}

int Topology::n_pus() const {
  int n = 0;
  for (const TopoNumaNode& node : nodes_) {
    for (const TopoCore& c : node.cores) n += static_cast<int>(c.pus.size());
  }
  return n;
}

uint64_t Topology::total_memory() const {
  uint64_t b = 0;
  for (const TopoNumaNode& node : nodes_) b += node.memory_bytes;
  return b;
}

std::string Topology::Summary() const {
  std::string out = Cat(n_packages_, n_packages_ == 1 ? " package, " : " packages, ", nodes_.size(),
                        nodes_.size() == 1 ? " NUMA node:" : " NUMA nodes:");
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const TopoNumaNode& n = nodes_[i];
    std::vector<int> pus;
    for (const TopoCore& c : n.cores) pus.insert(pus.end(), c.pus.begin(), c.pus.end());
    std::sort(pus.begin(), pus.end());
    out += Cat(i == 0 ? " " : ", ", "node ", n.os_index, " (",
               absl::StrFormat("%.1f GiB", static_cast<double>(n.memory_bytes) / (1ull << 30)), ", ",
               n.cores.size(), " cores", pus.empty() ? "" : ", PUs ", RangeList(pus), ")");
  }
  return out;
}

}  // namespace tandem
