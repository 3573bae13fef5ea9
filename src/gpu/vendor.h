#pragma once
// Which vendor a GPU is, from what every view of it carries (the agent's wire
// included): its UUID's form. NVIDIA's is "GPU-" and a dashed UUID
// ("GPU-7282…-…"); an AMD GPU's is ROCm's, "GPU-" and 16 hex digits of KFD's
// unique_id (gpu/amd_sysfs.h amd_uuid). docs/amd.md.

#include <string>
#include <string_view>

#include "gpu/gpu_info.h"

namespace gpureap::gpu {

enum class Vendor { nvidia, amd };
/// "nvidia", "amd" (util/enum_names.h): `--json`'s "vendor" of a GPU.
std::string_view enum_name(Vendor vendor);

/// AMD when the UUID has ROCm's form; NVIDIA otherwise (also when it is unknown).
Vendor vendor_of(std::string_view uuid);

/// The device node a GPU's minor names: "/dev/nvidia<minor>", or "/dev/dri/renderD<minor>"
/// for an AMD GPU; "" without a minor.
std::string device_node_path(const GpuInfo& gpu);

}  // namespace gpureap::gpu
