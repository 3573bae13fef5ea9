#pragma once
// "Freed" is measured: poll NVML until each GPU's used memory is back at its
// idle baseline (within a tolerance), with a deadline and no fixed sleeps (the
// poll interval starts at a few ms and backs off gently).

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "gpu/gpu_source.h"
#include "reclaim/escalation.h"

namespace gpureap::reclaim {

struct ReleaseTarget {
  unsigned index = 0;
  std::uint64_t threshold = 0;  // used <= threshold counts as freed (baseline + tolerance)
};

struct ReleaseState {
  unsigned index = 0;
  std::optional<std::uint64_t> used;  // latest reading
  std::optional<double> freed_at;     // seconds since t0 when first seen freed
  std::string problem;  // this GPU could not be read (lost, hung): never counted as freed
};

struct ReleaseResult {
  std::vector<ReleaseState> gpus;
  bool all_freed = false;
  bool interrupted = false;
  std::string nvml_error;  // set when NVML failed or hung while waiting, or a GPU could not be read
};

/// Polls until every target GPU is freed, the deadline passes, NVML fails, or
/// `interrupted` is set. A GPU that cannot be read (its reading has a problem)
/// is no longer polled and is not freed; the others are polled on. `progress` (may be empty) sees every reading.
ReleaseResult wait_for_release(
    gpu::GpuSource& gpus, const std::vector<ReleaseTarget>& targets, Clock::time_point deadline,
    Clock::time_point t0, const std::atomic<bool>* interrupted,
    const std::function<void(const std::vector<ReleaseState>&)>& progress);

}  // namespace gpureap::reclaim
