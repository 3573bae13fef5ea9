#include "gpu/vendor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace gpureap::gpu {

std::string_view enum_name(Vendor vendor) {
  switch (vendor) {
    case Vendor::nvidia: return "nvidia";
    case Vendor::amd: return "amd";
  }
  return {};
}

Vendor vendor_of(std::string_view uuid) {
  constexpr std::string_view prefix = "GPU-";
  if (!uuid.starts_with(prefix) || uuid.size() != prefix.size() + 16) return Vendor::nvidia;
  const std::string_view digits = uuid.substr(prefix.size());
  return std::all_of(digits.begin(), digits.end(),
                     [](unsigned char c) { return std::isxdigit(c) != 0; })
             ? Vendor::amd
             : Vendor::nvidia;
}

std::span<const std::string_view> visible_devices_variables(Vendor vendor) {
  static constexpr std::string_view kNvidia[] = {"CUDA_VISIBLE_DEVICES"};
  static constexpr std::string_view kAmd[] = {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                              "CUDA_VISIBLE_DEVICES"};
  switch (vendor) {
    case Vendor::nvidia: return kNvidia;
    case Vendor::amd: return kAmd;
  }
  return {};
}

std::vector<std::string_view> all_visible_devices_variables() {
  std::vector<std::string_view> out;
  for (Vendor v : {Vendor::nvidia, Vendor::amd})
    for (std::string_view name : visible_devices_variables(v))
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

std::string_view smi_command(Vendor vendor) {
  return vendor == Vendor::amd ? "amd-smi" : "nvidia-smi";
}

std::string_view driver_interface(Vendor vendor) {
  return vendor == Vendor::amd ? "amdgpu's sysfs" : "NVML";
}

std::string_view driver_errors(Vendor vendor) {
  return vendor == Vendor::amd ? "amdgpu errors" : "Xid errors";
}

std::string device_node_path(const GpuInfo& gpu) {
  if (!gpu.minor) return "";
  if (vendor_of(gpu.uuid) == Vendor::amd) return fmt::format("/dev/dri/renderD{}", *gpu.minor);
  return fmt::format("/dev/nvidia{}", *gpu.minor);
}

}  // namespace gpureap::gpu
