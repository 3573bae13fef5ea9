#pragma once
// MIG (issue 25): every MIG device is a GPU to gpureap. NVML reads a GPU in MIG mode
// through its MIG device handles (gpu/nvml_library.cc keeps them under the physical
// GPU's GpuInfo::mig_devices); this file puts each MIG device in its physical GPU's
// place, and says which MIG device a capability a process holds (proc/mig_caps.h)
// gives access to.

#include <set>
#include <string>
#include <vector>

#include "gpu/gpu_info.h"
#include "proc/mig_caps.h"

namespace gpureap::gpu {

/// Replaces each GPU in MIG mode that NVML listed MIG devices for by those devices
/// (in the GPU's place, ordered by GPU instance then compute instance). A GPU in MIG
/// mode without MIG devices (none created, or they could not be read) stays as it is.
void flatten_mig(std::vector<GpuInfo>& gpus);
/// The same for memory readings (MemoryReading::mig).
void flatten_mig(std::vector<MemoryReading>& readings);

/// A MIG device's profile as its NVML name ends ("NVIDIA A100-SXM4-40GB MIG 1g.5gb" ->
/// "1g.5gb"; dcgm-exporter's GPU_I_PROFILE label); "" for a whole GPU or a name without it.
std::string mig_profile(const GpuInfo& device);

/// True when `device` (a MIG device's id) is what `access` gives access to on a GPU
/// whose minor is `gpu_minor`: the same GPU instance, and the same compute instance
/// when `access` names one.
bool grants(const proc::MigAccess& access, unsigned gpu_minor, const DeviceId& device);

/// True when `a` and `b` are two compute instances of one GPU instance (CI-level sharing)
/// that report the same memory figures (total and used): NVML answers a MIG device's
/// memory query with its GPU instance's memory, which its compute instances share.
bool shares_memory(const GpuInfo& a, const GpuInfo& b);

/// True when a process holding the capabilities `held` uses `device` (a MIG device's id)
/// of the GPU whose minor is `gpu_minor`. CUDA opens its GPU instance's capability and
/// its compute instance's; the GPU instance's is shared by every compute instance of it
/// (CI-level sharing: 0/gi1/ci0 and 0/gi1/ci1), so a process that holds a compute
/// instance's capability of that GPU instance uses only the compute instances it holds,
/// and one holding the GPU instance's alone may use any of them.
bool uses_mig_device(const std::set<proc::MigAccess>& held, unsigned gpu_minor,
                     const DeviceId& device);

}  // namespace gpureap::gpu
