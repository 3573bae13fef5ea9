#pragma once
// The seam between gpureap and the GPU driver. Real implementations: NvmlSource
// (NVML loaded with dlopen, queried in a watchdog child), AmdSource (amdgpu's and
// KFD's sysfs) and MixedSource (a node with both: NVIDIA's GPUs first, AMD's after);
// and one fake for unit tests. The simulated driver in sim/ is exercised through the
// real implementation, so end-to-end tests use the same code path as a GPU host.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_info.h"
#include "proc/device_nodes.h"
#include "util/result.h"

namespace gpureap::gpu {

/// Why the GPU view is missing or partial, for the "no driver / NVML error /
/// NVML hung" messages. `ok` means every query answered. `partial`: every GPU
/// is listed, and some of them (each with its GpuInfo::problem) could not be
/// read or did not answer in time; the others are complete.
enum class SourceState { ok, library_missing, init_failed, query_failed, hung, partial };
/// "ok", "library_missing", ... (util/enum_names.h): `--json`, the agent's and the worker's wire.
std::string_view enum_name(SourceState state);

/// True when the snapshot lists the GPUs (all complete, or some marked).
inline bool lists_gpus(SourceState state) {
  return state == SourceState::ok || state == SourceState::partial;
}

struct GpuSnapshot {
  SourceState state = SourceState::ok;
  std::string problem;          // human-readable when state != ok
  std::string driver_version;   // empty when unknown
  std::string cuda_version;     // "12.4", the CUDA version the driver supports; "" if unknown
  std::vector<GpuInfo> gpus;
};

class GpuSource {
 public:
  virtual ~GpuSource() = default;

  /// Every GPU with identity, memory and NVML's process list. Never blocks past
  /// `deadline`; a hang of NVML as a whole is reported as state == hung with no
  /// GPUs, one of some GPUs as state == partial with those GPUs marked. Never
  /// fails: problems are described in the snapshot.
  virtual GpuSnapshot snapshot(std::chrono::milliseconds deadline) = 0;

  /// Used memory and NVML pids of the GPUs with the given indices, for release
  /// polling. A GPU that cannot be read or does not answer in time has a
  /// reading with `problem` set; the others are read. Fails (with a message)
  /// when NVML as a whole fails or does not answer in time.
  virtual Result<std::vector<MemoryReading>> memory(const std::vector<DeviceId>& ids,
                                                    std::chrono::milliseconds deadline) = 0;

  /// Drops any connection to the driver (needed before a GPU reset: our own NVML
  /// session counts as a client). The next call reconnects.
  virtual void disconnect() = 0;

  /// The pid of our own helper process that talks to the driver, if any: it has
  /// the device nodes open itself and must not be reported as a holder.
  virtual std::optional<pid_t> worker_pid() const { return std::nullopt; }

  /// Starts gathering a snapshot without waiting for it, so that the driver's
  /// start-up (nvmlInit and GPU attach: ~18 ms on an H200) overlaps other work
  /// such as the /proc scan; the next snapshot() within a second collects it.
  /// Optional: the default does nothing.
  virtual void prefetch_snapshot() {}

  /// For long-running callers (the agent), after a snapshot that hung (as a whole,
  /// or some GPUs) or failed to start NVML (library missing, nvmlInit failed: a
  /// driver not loaded yet at boot, a driver reload): a hang or a failed start is
  /// remembered and every call refused, and a GPU whose query is stuck is not
  /// asked again by the same helper. This starts afresh: the failure forgotten,
  /// the helper replaced, so the next call asks NVML again (nvmlInit included),
  /// but only once no earlier helper is stuck in the driver (one that cannot be
  /// killed is not joined by another that would get stuck too).
  /// Returns whether the next call will ask afresh. The default: nothing to do.
  virtual bool retry_after_failure() { return false; }

  /// True while a snapshot asked for by prefetch_snapshot() has not been answered
  /// yet, so that a caller that must not block (the agent's loop, probing a GPU
  /// that hung) can keep its last snapshot and ask again later; snapshot() then
  /// collects the answer at once. Never blocks. The default: nothing in flight.
  virtual bool snapshot_in_flight() { return false; }

  /// The vendor's registration with the one /proc sweep (nvtop's): the device nodes of
  /// its GPUs in `dev_dir` (each GPU node's minor is GpuInfo::minor of its GPU), each
  /// DRM node with the fdinfo reader the scan hands its fds' fdinfo to, and a warning
  /// per node found and ignored. inventory::Node adds them to the nodes
  /// proc::discover_devices finds (NVIDIA's). The default: none.
  virtual proc::DeviceSet device_nodes(const std::string& dev_dir) const {
    (void)dev_dir;
    return {};
  }
};

}  // namespace gpureap::gpu
