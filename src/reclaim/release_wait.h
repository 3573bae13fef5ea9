#pragma once
// "Freed" is measured: poll NVML until each GPU's used memory is back at its
// idle baseline (within a tolerance), with a deadline and no fixed sleeps (the
// poll interval starts at a few ms and backs off gently).

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_source.h"
#include "inventory/inventory.h"
#include "inventory/release_model.h"
#include "util/clock.h"

namespace gpureap::reclaim {

/// One GPU whose release is watched: what "freed" means for it, what was read,
/// and the verdict. The one per-GPU record of free's engine, run's verification
/// and the release wait.
struct GpuRelease {
  gpu::DeviceId gpu;
  std::string uuid;
  std::uint64_t total = 0;
  std::uint64_t baseline = 0;
  bool baseline_recorded = false;      // the baseline was measured idle, not estimated
  std::uint64_t own_bytes = 0;         // NVML's figure for the processes released (run's), 0: unknown
  std::uint64_t left_alone_bytes = 0;  // NVML's figure for holders not in the plan (D9), or
                                       // outside the run
  std::uint64_t threshold =
      0;  // used <= threshold counts as freed (baseline + tolerance + left alone)
  std::uint64_t before = 0;           // before any signal
  bool before_read = true;  // false: no reading before the signals (`before` is not one)
  std::optional<std::uint64_t> used;  // the latest reading
  std::optional<double> freed_at;     // seconds since t0 when first seen freed
  bool freed = false;                 // the verdict
  bool measured = true;  // false: NVML cannot read this GPU (lost, hung); never counted freed
  std::string problem;   // why the latest reading failed: never counted as freed
  // The release's phases (issue 35), in seconds since t0: the first signal to a holder of
  // this GPU, the last one's exit, the first reading in which NVML lists none of
  // `released_pids`; the baseline is freed_at. nullopt: not seen.
  std::vector<std::uint32_t> released_pids;
  std::optional<double> signalled_at;
  std::optional<double> exited_at;
  std::optional<double> unlisted_at;

  std::uint64_t after() const { return used.value_or(before); }
};

/// A release's phases in seconds (each nullopt when an end of it was not seen): from the
/// signal to the holders' exit, from the exit until NVML lists them no more, and from then
/// until memory is back at the baseline (pinned host memory is unpinned in the last two).
struct ReleasePhases {
  std::optional<double> signal_to_exit;
  std::optional<double> exit_to_unlisted;
  std::optional<double> unlisted_to_baseline;
};
ReleasePhases release_phases(const GpuRelease& g);

/// The one constructor of the record, from a look at the GPU: "freed" means used memory at
/// most its baseline + `below` (default: inventory::freed_tolerance of its total) + the
/// `left_alone` bytes that others keep there. `before` is the look's used memory; `used`
/// stays empty until a reading (or the caller) sets it. A GPU NVML gave no memory figure
/// for is not `measured`, with the reason in `problem`, and can never count as freed.
GpuRelease release_of(const inventory::GpuView& view, std::uint64_t left_alone = 0,
                      std::optional<std::uint64_t> below = std::nullopt);

struct ReleaseResult {
  std::vector<GpuRelease> gpus;
  bool all_freed = false;  // every GPU at or below its threshold in the last reading
  bool interrupted = false;
  std::string source_error;  // set when NVML failed or hung while waiting, or a GPU could not be read
};

/// Polls until every GPU of `gpus` is at or below its threshold in one and the same
/// reading (all_freed), the deadline passes, NVML fails, or `interrupted` is set;
/// returns them with their readings (`used`; `freed_at` when first seen freed in the
/// current stretch, cleared by a later reading above the threshold; `problem`). Every
/// measured GPU is read every time. A GPU that is not `measured`, or that cannot be read,
/// is never freed (so all_freed stays false) and is not polled; the others are polled on
/// until the deadline. `progress` (may be empty) sees every reading. Time is read, and
/// waited, on `clock` (the node's). `releases` (the node's release model, may be null) is
/// handed every reading, so that whether memory falls is its answer over every reading
/// (inventory/release_model.h, one release clock).
/// One reading of every GPU of `gpus` (`now`: seconds since the caller's t0), recorded as
/// wait_for_release records its readings (used, freed_at, unlisted_at; the release model
/// handed it). True when every GPU is measured and read at or below its threshold: what
/// free asks while its holders are dying (EscalationEnv::released). NVML's process list is
/// not asked: on the H100 it lists a dying torch worker until its exit ends, ~30 ms after
/// its memory is back, and a process inside its exit allocates nothing more. False when
/// NVML fails.
bool released_in_one_reading(gpu::GpuSource& source, std::vector<GpuRelease>& gpus, double now,
                             std::chrono::milliseconds deadline, util::Clock& clock,
                             inventory::ReleaseTracker* releases);

ReleaseResult wait_for_release(gpu::GpuSource& source, std::vector<GpuRelease> gpus,
                               util::Clock::time_point deadline, util::Clock::time_point t0,
                               const std::atomic<bool>* interrupted,
                               const std::function<void(const std::vector<GpuRelease>&)>& progress,
                               util::Clock& clock = util::system_clock(),
                               inventory::ReleaseTracker* releases = nullptr);

}  // namespace gpureap::reclaim
