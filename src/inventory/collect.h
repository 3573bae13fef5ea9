#pragma once
// One look at the machine: NVML snapshot and /proc holder scan, run side by side
// (the NVML round trip happens in a helper process while this one reads /proc),
// joined into an Inventory.

#include <chrono>
#include <set>
#include <string>

#include "gpu/gpu_source.h"
#include "inventory/inventory.h"
#include "proc/device_nodes.h"
#include "util/clock.h"

namespace gpureap::inventory {

struct CollectOptions {
  std::string proc_root = "/proc";
  std::chrono::milliseconds nvml_deadline{2000};
  std::set<pid_t> exclude;  // in addition to ourselves and our NVML helper
  util::Clock* clock = nullptr;  // waits between re-readings; nullptr: the system clock
};

/// Takes the snapshot and the scan concurrently and builds the inventory. When
/// some GPU has memory no holder explains, reads its memory once more so that a
/// release in progress is told apart from driver-held memory.
Inventory collect_inventory(gpu::GpuSource& gpus, const proc::DeviceSet& devices,
                            BaselineStore& baselines, const CollectOptions& options = {});

}  // namespace gpureap::inventory
