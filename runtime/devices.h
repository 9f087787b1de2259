// The devices of one run, as a list: index 0 is always the host CPU, and the accelerators (CUDA GPUs, simulated
// GPUs) follow in the order they were given. Plans name devices by these indices (graph/plan.h), and the executor
// runs each unit on the backend its placement names.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend.h"

namespace tandem {

inline constexpr int kHostDevice = 0;

class DeviceRegistry {
 public:
  // The host CPU becomes device 0.
  explicit DeviceRegistry(std::unique_ptr<Backend> cpu);
  DeviceRegistry(DeviceRegistry&&) = default;
  DeviceRegistry& operator=(DeviceRegistry&&) = default;
  ~DeviceRegistry();

  // Adds an accelerator and returns its index (1, 2, ...). `spec` names it in plans ("cuda:0", "sim:12GiB"). The
  // backend may be null: a device the plan leaves empty is not kept open.
  int Add(std::string spec, std::unique_ptr<Backend> backend);

  int size() const { return static_cast<int>(devices_.size()); }
  Backend* backend_or_null(int i) const {
    return i >= 0 && i < size() ? devices_[static_cast<size_t>(i)].backend.get() : nullptr;
  }
  const std::string& spec(int i) const { return devices_.at(static_cast<size_t>(i)).spec; }
  Backend& host() const { return *devices_.front().backend; }
  // Every device's backend by index, null where a device is not open: what the executor runs on.
  std::vector<Backend*> all() const;

 private:
  struct Entry {
    std::string spec;
    std::unique_ptr<Backend> backend;
  };
  std::vector<Entry> devices_;
};

}  // namespace tandem
