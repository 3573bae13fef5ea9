#pragma once
// `gpureap-sim node --vendor amd`: a simulated AMD node. Instead of NVML's answers
// (the stand-in library), gpureap reads what amdgpu and amdkfd write in sysfs, so
// the node is a sysfs tree under D/sys plus plain-file device nodes:
//
//   D/dev/kfd, D/dev/dri/renderD<128+i>, D/dev/dri/card<i>   plain files (the marker's rule)
//   D/sys/class/kfd/kfd/topology/nodes/0/                    a CPU node (gpu_id 0)
//   D/sys/class/kfd/kfd/topology/nodes/<i+1>/{gpu_id,name,properties}
//   D/sys/class/kfd/kfd/proc/<pid>/{pasid,vram_<gpu_id>}     per holder process
//   D/sys/devices/pci0000:00/<pci>/{mem_info_vram_total,mem_info_vram_used,product_name}
//   D/sys/devices/pci0000:00/<pci>/hwmon/hwmon0/{temp1_input,power1_average}  (sensors)
//   D/sys/devices/pci0000:00/<pci>/drm/{card<i>,renderD<m>}/{dev,device -> ../..}
//   D/sys/class/drm/{card<i>,renderD<m>} -> ../../devices/pci0000:00/<pci>/drm/...
//
// The kernel writes those files; here a small driver process does (`gpureap-sim
// amd-driver`, started by `node`, stopped by `cleanup`): every 10 ms it evaluates the
// registrations (registry.h, the rules the NVML stand-in applies: a holder holds while
// it lives, for its --release-delay after, forever with --stuck) and writes
// mem_info_vram_used (baseline + what is counted) and each live holder's KFD
// directory, removed when its memory is released (kfd_process_wq_release) or at its
// death when stuck (driver-held: stranded VRAM with no process). A holder waits for
// the driver to show its allocation before it reports ready.

#include <cstdint>
#include <string>
#include <vector>

#include "sim/node_config.h"
#include "util/result.h"

namespace gpureap::sim {

/// What the simulated amdgpu calls GPU `index`.
struct AmdGpuIds {
  std::uint32_t gpu_id = 0;      // KFD's
  unsigned render_minor = 0;     // renderD<render_minor>
  unsigned card = 0;             // card<card>
  std::string pci;               // "0000:0c:00.0"
  std::uint64_t unique_id = 0;
};
AmdGpuIds amd_gpu_ids(const GpuConfig& gpu);

/// Writes the device nodes, the marker and the sysfs tree of an AMD node.
Result<void> write_amd_tree(const SimPaths& paths, const NodeConfig& node);
/// A GPU's hwmon files (device/hwmon/hwmon0/temp1_input, power1_average) from its
/// sensors; a sensor that is unset has no file (not supported).
Result<void> write_amd_sensors(const SimPaths& paths, const GpuConfig& gpu);
/// The sysfs root gpureap reads ($GPUREAP_SYSFS_ROOT).
fs::path amd_sysfs_root(const SimPaths& paths);
/// The nodes a ROCm process opens for GPU `gpu`: /dev/kfd and its render node (mapped).
std::vector<fs::path> amd_holder_nodes(const SimPaths& paths, const GpuConfig& gpu);
/// Waits (up to 10 s) until the driver shows `pid`'s allocation on `gpu` in KFD's files.
Result<void> await_amd_allocation(const SimPaths& paths, const GpuConfig& gpu, pid_t pid);

/// Starts the driver process for node `paths` (setsid, double fork; D/driver.pid).
Result<void> start_amd_driver(const SimPaths& paths);
/// Starts it unless it runs (it stops by itself after 10 minutes with nothing held).
Result<void> ensure_amd_driver(const SimPaths& paths);
/// Stops the node's driver process, if one runs (verified by its start time).
void stop_amd_driver(const SimPaths& paths);
/// The driver's loop (`gpureap-sim amd-driver --dir D`): until node.json is gone, D/driver.pid
/// names another process, SIGTERM, or 10 minutes with nothing held.
int run_amd_driver(const fs::path& dir);

}  // namespace gpureap::sim
