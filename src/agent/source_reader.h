#pragma once
// The agent's NVML readings (agent/watcher.h): the latest snapshot, the SM utilization of
// the ones before it (the window in which a busy GPU with no process is a ghost), and
// when to ask a hung or not-started NVML again. A hung NVML (or GPU) is not asked again
// by the source, nor is a driver whose nvmlInit failed (not loaded yet at boot, a
// reload): the agent must recover when the driver does, so it asks afresh, backed off
// (kRetryStart doubling to kHangRetryMax after a hang, kInitRetryMax after a failed
// start), and only once the helper that hung has exited. The probe is prefetched: the
// last snapshot is kept until the fresh helper answers (at most the NVML deadline), so a
// driver that is still stuck never holds up the loop, and one that answers again is seen
// at the next tick (W2-04, W2-22).

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "gpu/gpu_source.h"
#include "util/clock.h"

namespace gpureap::agent {

class SourceReader {
 public:
  static constexpr std::chrono::milliseconds kRetryStart{1000};
  static constexpr std::chrono::milliseconds kHangRetryMax{2000};
  static constexpr std::chrono::milliseconds kInitRetryMax{30000};

  /// A new snapshot from `gpus` (its answer within `deadline`), or the last one kept
  /// while a probe of a hung or not-started NVML has not answered yet.
  void take(gpu::GpuSource& gpus, util::Clock::time_point now, std::chrono::milliseconds deadline);

  const gpu::GpuSnapshot& snapshot() const { return snapshot_; }
  /// SM utilization of earlier snapshots (index -> percent, oldest first, at most
  /// inventory::kBusyTicks - 1).
  const std::map<gpu::DeviceId, std::vector<unsigned>>& busy_history() const { return busy_history_; }
  /// The pids the snapshot lists, any GPU.
  std::set<pid_t> listed_pids() const;

 private:
  gpu::GpuSnapshot snapshot_;
  std::map<gpu::DeviceId, std::vector<unsigned>> busy_history_;
  // After a hang or a failed start: when to ask NVML again, and since when a fresh
  // helper's first answer is awaited.
  util::Clock::time_point next_retry_{};
  std::optional<util::Clock::time_point> probe_since_;
  std::chrono::milliseconds backoff_{kRetryStart};
};

}  // namespace gpureap::agent
