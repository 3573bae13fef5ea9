#pragma once
// Which vendor a GPU is, from what every view of it carries (the agent's wire
// included): its UUID's form. NVIDIA's is "GPU-" and a dashed UUID
// ("GPU-7282…-…"); an AMD GPU's is ROCm's, "GPU-" and 16 hex digits of KFD's
// unique_id (gpu/amd_sysfs.h amd_uuid). docs/amd.md.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_info.h"

namespace gpureap::gpu {

enum class Vendor { nvidia, amd };
/// "nvidia", "amd" (util/enum_names.h): `--json`'s "vendor" of a GPU.
std::string_view enum_name(Vendor vendor);

/// AMD when the UUID has ROCm's form; NVIDIA otherwise (also when it is unknown).
Vendor vendor_of(std::string_view uuid);

/// The environment variables a vendor's runtime reads for the GPUs a process may see, in
/// the order it honours them: NVIDIA's CUDA_VISIBLE_DEVICES; AMD's ROCR_VISIBLE_DEVICES
/// (the ROCr runtime, under everything), HIP_VISIBLE_DEVICES (HIP), and
/// CUDA_VISIBLE_DEVICES, which HIP honours too (HIP's docs, "GPU isolation techniques").
/// Slurm sets CUDA_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES for a job's GPUs.
std::span<const std::string_view> visible_devices_variables(Vendor vendor);

/// Every vendor's visible-devices variables, each once, NVIDIA's first: what a caller that
/// does not know the node's vendor yet reads (a UUID in any of them names its GPU).
std::vector<std::string_view> all_visible_devices_variables();

/// The words a person uses for a vendor's own tools, for advice: "nvidia-smi" / "amd-smi"
/// (the command that lists a GPU's processes), "NVML" / "amdgpu's sysfs" (what gpureap
/// reads the GPUs through).
std::string_view smi_command(Vendor vendor);
std::string_view driver_interface(Vendor vendor);
/// What to look for in the kernel log when the driver is in trouble: "Xid errors" (the
/// NVIDIA driver's) / "amdgpu errors".
std::string_view driver_errors(Vendor vendor);

/// The device node a GPU's minor names: "/dev/nvidia<minor>", or "/dev/dri/renderD<minor>"
/// for an AMD GPU; "" without a minor.
std::string device_node_path(const GpuInfo& gpu);

}  // namespace gpureap::gpu
