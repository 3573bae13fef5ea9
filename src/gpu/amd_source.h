#pragma once
// AMD GPUs behind the GpuSource seam, from the kernel's own files (no ROCm
// library): amdkfd's topology for identity, amdgpu's mem_info_vram_{total,used}
// for memory, amdkfd's /sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id> as the
// per-GPU process list (the counterpart of NVML's: host pids, a hint that the
// /proc scan confirms). Its device nodes (/dev/kfd, /dev/dri/renderD<M> and
// card<N>, DRM major 226) are registered with the /proc sweep with amdgpu's
// fdinfo reader (device_nodes()). Everything is read under a sysfs root (/sys,
// or a simulated node's tree: gpureap-sim node --vendor amd). docs/amd.md.
//
// A GPU's index is its place among the topology's GPU nodes (node number order,
// as ROCm enumerates agents); its minor is its render node's minor (the
// topology's drm_render_minor), which its card node is counted under as well.

#include <memory>
#include <string>
#include <vector>

#include "gpu/amd_sysfs.h"
#include "gpu/gpu_source.h"

namespace gpureap::gpu {

class AmdSource final : public GpuSource {
 public:
  explicit AmdSource(std::string sysfs_root);

  /// Reads sysfs in this process: amdgpu's and KFD's attributes answer from memory
  /// (no device query), so there is no helper process and `deadline` is not needed.
  GpuSnapshot snapshot(std::chrono::milliseconds deadline) override;
  Result<std::vector<MemoryReading>> memory(const std::vector<DeviceId>& ids,
                                            std::chrono::milliseconds deadline) override;
  void disconnect() override {}
  proc::DeviceSet device_nodes(const std::string& dev_dir) const override;

  const std::string& sysfs_root() const { return root_; }

  /// One AMD GPU as found: its topology node and its card's device directory.
  struct Found {
    KfdGpu kfd;
    std::optional<unsigned> card;  // /sys/class/drm/card<N> of the same PCI device
    std::string device_dir;        // <root>/class/drm/card<N>/device; "" when none
    std::string problem;           // why its card was not found
  };
  /// The GPUs of the topology, in index order; `problem` says why there are none
  /// when the topology cannot be read.
  std::vector<Found> find_gpus(std::string* problem) const;

 private:
  const std::vector<Found>& known_gpus();

  std::string root_;
  std::vector<Found> gpus_;  // from the last snapshot
};

/// True when `sysfs_root`'s KFD topology lists at least one GPU.
bool has_amd_gpus(const std::string& sysfs_root);

std::unique_ptr<GpuSource> make_amd_source(std::string sysfs_root);

}  // namespace gpureap::gpu
