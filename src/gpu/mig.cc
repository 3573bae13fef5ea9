#include "gpu/mig.h"

#include <algorithm>

namespace gpureap::gpu {
namespace {

template <typename T>
void flatten(std::vector<T>& items, std::vector<T> T::*children) {
  std::vector<T> out;
  out.reserve(items.size());
  for (T& item : items) {
    auto& mig = item.*children;
    if (mig.empty()) {
      out.push_back(std::move(item));
      continue;
    }
    std::sort(mig.begin(), mig.end(), [](const T& a, const T& b) { return a.id < b.id; });
    for (T& d : mig) out.push_back(std::move(d));
  }
  items = std::move(out);
}

}  // namespace

void flatten_mig(std::vector<GpuInfo>& gpus) { flatten(gpus, &GpuInfo::mig_devices); }

void flatten_mig(std::vector<MemoryReading>& readings) { flatten(readings, &MemoryReading::mig); }

std::string mig_profile(const GpuInfo& device) {
  constexpr std::string_view marker = " MIG ";
  if (!device.id.mig()) return {};
  const auto at = device.name.rfind(marker);
  if (at == std::string::npos) return {};
  std::string profile = device.name.substr(at + marker.size());
  return profile.find(' ') == std::string::npos ? profile : std::string();
}

bool grants(const proc::MigAccess& access, unsigned gpu_minor, const DeviceId& device) {
  return device.mig() && access.gpu_minor == gpu_minor && access.gi == *device.gi &&
         (!access.ci || access.ci == device.ci);
}

bool shares_memory(const GpuInfo& a, const GpuInfo& b) {
  return a.id.mig() && b.id.mig() && a.id != b.id && a.id.parent() == b.id.parent() &&
         a.id.gi == b.id.gi && a.memory && b.memory && a.memory->total == b.memory->total &&
         a.memory->used == b.memory->used;
}

bool uses_mig_device(const std::set<proc::MigAccess>& held, unsigned gpu_minor,
                     const DeviceId& device) {
  bool gpu_instance = false, some_compute_instance = false;
  for (const proc::MigAccess& a : held) {
    if (!grants(proc::MigAccess{a.gpu_minor, a.gi, std::nullopt}, gpu_minor, device)) continue;
    if (!a.ci) {
      gpu_instance = true;
      continue;
    }
    some_compute_instance = true;
    if (a.ci == device.ci) return true;
  }
  return gpu_instance && !some_compute_instance;
}

}  // namespace gpureap::gpu
