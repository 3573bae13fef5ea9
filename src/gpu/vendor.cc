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

std::string device_node_path(const GpuInfo& gpu) {
  if (!gpu.minor) return "";
  if (vendor_of(gpu.uuid) == Vendor::amd) return fmt::format("/dev/dri/renderD{}", *gpu.minor);
  return fmt::format("/dev/nvidia{}", *gpu.minor);
}

}  // namespace gpureap::gpu
