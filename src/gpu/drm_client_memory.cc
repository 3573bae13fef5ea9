#include "gpu/drm_client_memory.h"

#include <algorithm>
#include <set>
#include <utility>

namespace gpureap::gpu {

void add_drm_client_memory(GpuSnapshot& snapshot, const std::vector<proc::Holder>& holders) {
  if (std::none_of(holders.begin(), holders.end(),
                   [](const proc::Holder& h) { return !h.drm_clients.empty(); }))
    return;
  for (GpuInfo& gpu : snapshot.gpus) {
    if (gpu.pci_bus_id.empty() || gpu.id.mig()) continue;
    std::set<std::uint64_t> counted;  // client ids of this device seen so far
    for (const proc::Holder& h : holders) {
      std::optional<std::uint64_t> bytes;
      for (const proc::DrmClient& c : h.drm_clients) {
        if (!c.device_bytes || !proc::same_pci_address(c.pdev, gpu.pci_bus_id)) continue;
        if (c.client_id && !counted.insert(*c.client_id).second) continue;
        bytes = bytes.value_or(0) + *c.device_bytes;
      }
      if (!bytes) continue;
      const auto pid = static_cast<std::uint32_t>(h.id.pid);
      auto listed = std::find_if(gpu.processes.begin(), gpu.processes.end(),
                                 [&](const GpuProcess& p) { return p.pid == pid; });
      if (listed != gpu.processes.end()) {
        if (!listed->used_bytes) listed->used_bytes = bytes;
      } else if (*bytes > 0) {
        gpu.processes.push_back(GpuProcess{pid, bytes, ProcessKind::graphics});
      }
    }
  }
}

}  // namespace gpureap::gpu
