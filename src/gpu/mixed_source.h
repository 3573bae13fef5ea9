#pragma once
// A node with NVIDIA and AMD GPUs (issue 39, docs/amd.md "A mixed node"): one GpuSource
// over NVML's (NvmlSource) and amdgpu's (AmdSource). NVIDIA's GPUs come first, at NVML's
// indices; AMD's follow, in KFD node order: AMD GPU k is index N + k, N the number of
// NVIDIA GPUs NVML lists. The indices are stable while the set of GPUs is (a GPU added
// or gone renumbers the AMD GPUs after it, as it does NVML's own).
//
// What each call does:
//   snapshot   both sides'; a side that fails as a whole after it once answered keeps
//              its GPUs (identity only) marked with its problem, so the other side's
//              indices do not move: the snapshot is then `partial`. NVML failing before
//              it ever answered leaves N unknown: the snapshot is NVML's failure (no
//              GPU listed), since an AMD GPU's index cannot be told without N.
//   memory     routed by index, the AMD GPUs' ids translated; a side that fails as a
//              whole marks its readings when the other side was asked too.
//   device_nodes  the union (NVML's none: proc::discover_devices finds NVIDIA's).
//   worker_pid, prefetch_snapshot, snapshot_in_flight, retry_after_failure: NVML's
//              (amdgpu's sysfs is read in this process, at once).

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_source.h"

namespace gpureap::gpu {

class MixedSource final : public GpuSource {
 public:
  /// `nvidia`: NVML's source; `amd`: amdgpu's. Neither null.
  MixedSource(std::unique_ptr<GpuSource> nvidia, std::unique_ptr<GpuSource> amd);

  GpuSnapshot snapshot(std::chrono::milliseconds deadline) override;
  Result<std::vector<MemoryReading>> memory(const std::vector<DeviceId>& ids,
                                            std::chrono::milliseconds deadline) override;
  void disconnect() override;
  std::optional<pid_t> worker_pid() const override { return nvidia_->worker_pid(); }
  void prefetch_snapshot() override { nvidia_->prefetch_snapshot(); }
  bool retry_after_failure() override { return nvidia_->retry_after_failure(); }
  bool snapshot_in_flight() override { return nvidia_->snapshot_in_flight(); }
  proc::DeviceSet device_nodes(const std::string& dev_dir) const override;

  /// N, the index of the first AMD GPU: nullopt until NVML has listed its GPUs once.
  std::optional<unsigned> amd_offset() const { return offset_; }

 private:
  std::unique_ptr<GpuSource> nvidia_, amd_;
  std::optional<unsigned> offset_;
  std::vector<GpuInfo> nvidia_known_, amd_known_;  // each side's last listing (AMD's local ids)
};

std::unique_ptr<GpuSource> make_mixed_source(std::unique_ptr<GpuSource> nvidia,
                                             std::unique_ptr<GpuSource> amd);

/// The node's GPU source, its vendors chosen (docs/amd.md, "How gpureap chooses the
/// vendor"): NVIDIA's (NVML from `nvml_library`, a flag resolve_nvml_library reads) when
/// `dev_dir` has nvidiactl, AMD's when KFD's topology ($GPUREAP_SYSFS_ROOT's, else /sys's)
/// lists a GPU, the mixed source when both. Neither: NVML (which then says why), except
/// that a named sysfs root on a node without nvidiactl is AMD's even while it lists no GPU.
std::unique_ptr<GpuSource> make_node_source(const std::string& dev_dir,
                                            std::string_view nvml_library);

}  // namespace gpureap::gpu
