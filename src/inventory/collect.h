#pragma once
// One look at the machine: NVML snapshot and /proc holder scan, run side by side
// (the NVML round trip happens in a helper process while this one reads /proc),
// joined into an Inventory.

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpu/gpu_source.h"
#include "inventory/inventory.h"
#include "inventory/release_model.h"
#include "proc/device_nodes.h"
#include "proc/holder_scan.h"
#include "proc/lineage.h"
#include "util/clock.h"

namespace gpureap::inventory {

struct CollectOptions {
  std::string proc_root;  // no default: Node::look() sets its own
  std::chrono::milliseconds source_deadline{2000};
  std::set<pid_t> exclude;       // in addition to ourselves and our NVML helper
  util::Clock* clock = nullptr;  // waits between re-readings; nullptr: the system clock
  /// Memory no holder explains is read again a few times (at most ~100 ms), readings
  /// for the release model (`releases`), which tells a release in progress from
  /// driver-held memory. The agent, whose tracker sees every tick, turns this off.
  bool reread_unexplained = true;
  /// Ghost GPUs: when a GPU reads busy with no process using it, sample its
  /// utilization again until kBusySamples readings span kBusyWindow (costs nothing
  /// when no GPU is such). The agent turns this off and passes the samples of its
  /// previous ticks in `busy_history` (index -> SM percent, oldest first) instead;
  /// a ghost then needs kBusyTicks consecutive busy ticks.
  bool sample_busy = true;
  /// These GPUs, when NVML lists no process on them and their memory is at the baseline,
  /// are not sampled: free's last look at the GPUs whose holders it just killed (back at
  /// the driver's floor, the verdict does not wait for the utilization average of the
  /// killed work to decay). A GPU that was a ghost before is sampled as ever.
  std::set<gpu::DeviceId> no_busy_window_at_baseline;
  std::map<gpu::DeviceId, std::vector<unsigned>> busy_history;
  /// The release model's memory of earlier looks (release_model.h): the looker's own
  /// (Node's, the agent's). nullptr: this look alone (no exit seen: no_holder, never
  /// driver_held). `judge_releases` false: recorded only.
  ReleaseTracker* releases = nullptr;
  bool judge_releases = true;
  /// The agent's witnesses: holder pid -> the parent (or group leader) it saw die.
  /// The orphan rule (proc/lineage.h) weighs them above what one scan can read.
  std::map<pid_t, proc::DeadParent> dead_parents;
  /// The agent's witnessed CUDA IPC imports (import_witness.h): who keeps a dead
  /// exporter's memory, which no look alone can tell.
  std::vector<ImportRecord> imports;
  /// The live runs' supervisors (inventory/run_records.h): proc::ScanOptions::run_supervisors.
  std::vector<proc::ProcessId> run_supervisors;
  /// Holders the agent's answer (this command's first look) called orphaned by what it
  /// saw die: a direct look keeps that verdict for the same, still adopted, process.
  std::vector<proc::Holder> witnessed;
  /// Also read the process table from the scan's own listing (Inventory::process_table).
  bool process_table = false;

  /// These options with NVML's deadline cut to the time left before `deadline` (at
  /// least 100 ms, so a reading can still be taken): every look of a bounded command.
  CollectOptions within(std::optional<util::Clock::time_point> deadline,
                        util::Clock::time_point now) const {
    CollectOptions cut = *this;
    if (!deadline) return cut;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now);
    cut.source_deadline = std::clamp(left, std::chrono::milliseconds(100), source_deadline);
    return cut;
  }
};

/// Takes the snapshot and the scan concurrently and builds the inventory. When
/// some GPU has memory no holder explains, reads its memory once more so that a
/// release in progress is told apart from driver-held memory.
/// The join step of a look, for a caller that keeps its own scan (the agent's
/// incremental one): drops our NVML helper from the holders, describes from /proc
/// the processes NVML lists that the scan did not read (another user's, when not
/// root), builds the inventory and classifies unexplained memory.
Inventory join_look(gpu::GpuSource& gpus, gpu::GpuSnapshot snapshot, proc::ScanResult scan,
                    const proc::DeviceSet& devices, BaselineStore& baselines,
                    const CollectOptions& options);

Inventory collect_inventory(gpu::GpuSource& gpus, const proc::DeviceSet& devices,
                            BaselineStore& baselines, const CollectOptions& options = {});

}  // namespace gpureap::inventory
