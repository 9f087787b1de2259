#include "runtime/devices.h"

#include <utility>

namespace tandem {

DeviceRegistry::DeviceRegistry(std::unique_ptr<Backend> cpu) { devices_.push_back({"cpu", std::move(cpu)}); }

DeviceRegistry::~DeviceRegistry() {
  // Accelerators first: their pinned host memory and streams go before the host backend they may copy from.
  while (devices_.size() > 1) devices_.pop_back();
}

int DeviceRegistry::Add(std::string spec, std::unique_ptr<Backend> backend) {
  devices_.push_back({std::move(spec), std::move(backend)});
  return size() - 1;
}

std::vector<Backend*> DeviceRegistry::all() const {
  std::vector<Backend*> out;
  for (const Entry& e : devices_) out.push_back(e.backend.get());
  return out;
}

}  // namespace tandem
