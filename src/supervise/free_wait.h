#pragma once
// Waiting until GPUs are free: every selected GPU's used memory at most
// `below` above its idle baseline. Behind `gpureap wait` and `gpureap run
// --wait-free`, for scripts that relaunch a server the moment the previous
// one's memory is really gone. Polls NVML with a short, backing-off interval
// (reclaim::wait_for_release), never a fixed sleep, and always with a deadline.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "inventory/node.h"
#include "reclaim/release_wait.h"

namespace gpureap::supervise {

/// How long `wait` and `run --wait-free` wait by default.
inline constexpr std::chrono::milliseconds kDefaultWaitTimeout{60000};

struct FreeWaitOptions {
  gpu::GpuSelector gpus = gpu::GpuSelector::every_gpu();  // --gpu
  std::optional<std::uint64_t> below;  // default: inventory::freed_tolerance(total) per GPU
  std::chrono::milliseconds timeout = kDefaultWaitTimeout;
};

struct FreeWaitResult {
  enum class Status {
    free,           // every selected GPU at or below its threshold
    timed_out,      // the deadline passed first
    bad_selection,  // --gpu matched nothing / was malformed (message says why)
    source_failed,    // NVML missing, failing or hung (message says which)
    ghost,          // a selected GPU is a ghost (busy with no process): no wait frees it
  };
  Status status = Status::source_failed;
  std::string message;
  /// What the caller should show the user as warnings (inventory::Inventory::warnings).
  std::vector<std::string> warnings;
  /// The selected GPUs: threshold (baseline + below), latest `used`, `freed_at` (seconds
  /// from the start) once seen free; one NVML cannot read has `measured` false (at the
  /// start) or a `problem` (while waiting), and the status is nvml_failed.
  std::vector<reclaim::GpuRelease> gpus;
  /// Selected GPUs that are ghosts (inventory::Busy::ghost: busy with no process),
  /// index -> the evidence: never free, whatever their memory says, since a new job
  /// there would run at a fraction of its speed.
  std::map<gpu::DeviceId, std::string> ghosts;
  double seconds = 0;
  /// On timeout: a fresh inventory of the selected GPUs, for the holder summary.
  std::optional<inventory::Inventory> holders;
};

/// Blocks until the selected GPUs are free or `options.timeout` passes.
/// A timeout of 0 checks once.
FreeWaitResult wait_until_free(inventory::Node& node, const FreeWaitOptions& options);

}  // namespace gpureap::supervise
