#include "reclaim/release_wait.h"

#include <algorithm>

namespace gpureap::reclaim {
namespace {

// Takes one reading of every polled GPU into `result`: the latest use, when each GPU
// was first seen freed in its current stretch (a reading above the threshold ends the
// stretch: memory taken again is not freed), and why a GPU could not be read (not
// measured is never freed; the other GPUs are still measured). Returns whether every
// GPU read was at or below its threshold in this one reading.
bool record(const std::vector<gpu::MemoryReading>& readings, double now, ReleaseResult& result) {
  bool all_below = true;
  for (const auto& r : readings) {
    auto g = std::find_if(result.gpus.begin(), result.gpus.end(),
                          [&](const GpuRelease& x) { return x.gpu == r.id; });
    if (g == result.gpus.end()) continue;
    if (!r.problem.empty()) {
      g->problem = r.problem;
      if (!result.source_error.empty()) result.source_error += "; ";
      result.source_error += r.problem;
      all_below = false;
      continue;
    }
    if (r.used) g->used = r.used;
    if (r.used && !g->unlisted_at && !g->released_pids.empty() &&
        std::none_of(g->released_pids.begin(), g->released_pids.end(), [&](std::uint32_t p) {
          return std::find(r.pids.begin(), r.pids.end(), p) != r.pids.end();
        }))
      g->unlisted_at = now;
    if (r.used && *r.used <= g->threshold) {
      if (!g->freed_at) g->freed_at = now;
    } else {
      g->freed_at.reset();
      all_below = false;
    }
  }
  return all_below;
}

// One reading of `polled` into `result` (record), handed to the release model too.
// False, with result.source_error set, when NVML as a whole failed.
Result<bool> take_reading(gpu::GpuSource& source, const std::vector<gpu::DeviceId>& polled,
                          ReleaseResult& result, double now, std::chrono::milliseconds deadline,
                          util::Clock& clock, inventory::ReleaseTracker* releases) {
  auto reading = source.memory(polled, deadline);
  if (!reading) {
    result.source_error = reading.error().message;
    return std::unexpected(reading.error());
  }
  const bool all_below = record(*reading, now, result);
  if (releases)
    for (const auto& r : *reading)
      for (const auto& g : result.gpus)
        if (g.gpu == r.id && r.used && r.problem.empty())
          releases->read(inventory::release_key(g.uuid, g.gpu), *r.used, g.total, clock.now());
  return all_below;
}

}  // namespace

bool released_in_one_reading(gpu::GpuSource& source, std::vector<GpuRelease>& gpus, double now,
                             std::chrono::milliseconds deadline, util::Clock& clock,
                             inventory::ReleaseTracker* releases) {
  ReleaseResult result;
  result.gpus = std::move(gpus);
  std::vector<gpu::DeviceId> polled;
  for (const auto& g : result.gpus)
    if (g.measured) polled.push_back(g.gpu);
  bool released = false;
  if (!polled.empty() && polled.size() == result.gpus.size()) {
    auto all_below = take_reading(source, polled, result, now, deadline, clock, releases);
    released = all_below && *all_below;
  }
  gpus = std::move(result.gpus);
  return released;
}

ReleasePhases release_phases(const GpuRelease& g) {
  ReleasePhases p;
  auto span = [](std::optional<double> from, std::optional<double> to) -> std::optional<double> {
    if (!from || !to) return std::nullopt;
    return std::max(0.0, *to - *from);
  };
  p.signal_to_exit = span(g.signalled_at, g.exited_at);
  // A holder NVML stopped listing before it was seen exiting: the phase is empty.
  const auto unlisted = g.unlisted_at && g.exited_at ? std::max(*g.unlisted_at, *g.exited_at)
                                                     : g.unlisted_at;
  p.exit_to_unlisted = span(g.exited_at, unlisted);
  p.unlisted_to_baseline = span(unlisted, g.freed_at);
  return p;
}

GpuRelease release_of(const inventory::GpuView& view, std::uint64_t left_alone,
                      std::optional<std::uint64_t> below) {
  GpuRelease g;
  g.gpu = view.info.id;
  g.uuid = view.info.uuid;
  g.baseline = view.baseline.bytes;
  g.baseline_recorded = view.baseline.recorded;
  g.left_alone_bytes = left_alone;
  if (!view.info.memory) {
    g.measured = false;
    g.problem = view.info.problem.empty() ? "NVML gives no memory figure" : view.info.problem;
    return g;
  }
  g.total = view.info.memory->total;
  g.before = view.used();
  g.threshold = g.baseline + below.value_or(inventory::freed_tolerance(g.total)) + left_alone;
  return g;
}

ReleaseResult wait_for_release(gpu::GpuSource& source, std::vector<GpuRelease> gpus,
                               util::Clock::time_point deadline, util::Clock::time_point t0,
                               const std::atomic<bool>* interrupted,
                               const std::function<void(const std::vector<GpuRelease>&)>& progress,
                               util::Clock& clock, inventory::ReleaseTracker* releases) {
  ReleaseResult result;
  result.gpus = std::move(gpus);
  // Every measured GPU is read every time, freed or not: the verdict needs all of them
  // at or below their thresholds in the same reading (a GPU seen free once is not free
  // for good: W2-14). One NVML cannot read (from the start, or a reading failed) is
  // never freed: with one, the others are polled until the deadline (with none
  // measured, the wait lasts until the deadline: its caller may measure them meanwhile).
  std::vector<gpu::DeviceId> polled;
  for (auto& g : result.gpus) {
    if (!g.measured) continue;
    g.problem.clear();
    polled.push_back(g.gpu);
  }
  // The driver frees memory asynchronously (about 0.2-0.4 s for tens of GiB on
  // an H200), so poll: first every 5 ms, backing off to 25 ms; each reading is
  // one round trip to the NVML helper, bounded by its own deadline.
  auto interval = std::chrono::milliseconds(5);
  for (;;) {
    if (!polled.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.now());
      auto read = take_reading(
          source, polled, result, std::chrono::duration<double>(clock.now() - t0).count(),
          std::clamp(left, std::chrono::milliseconds(200), std::chrono::milliseconds(2000)), clock,
          releases);
      if (!read) break;
      const bool all_below = *read;
      if (progress) progress(result.gpus);
      // A GPU that could not be read is polled no more (never freed); the others are.
      std::erase_if(polled, [&](gpu::DeviceId idx) {
        return std::any_of(result.gpus.begin(), result.gpus.end(), [&](const GpuRelease& g) {
          return g.gpu == idx && !g.problem.empty();
        });
      });
      if (all_below && polled.size() == result.gpus.size()) {
        result.all_freed = true;
        break;
      }
      if (polled.empty()) break;  // nothing left that can be read
    } else if (result.gpus.empty()) {
      result.all_freed = true;  // nothing to wait for
      break;
    }
    if (interrupted && interrupted->load()) {
      result.interrupted = true;
      break;
    }
    if (clock.now() + interval > deadline) break;
    clock.sleep_for(interval);
    interval = std::min(interval + std::chrono::milliseconds(5), std::chrono::milliseconds(25));
  }
  return result;
}

}  // namespace gpureap::reclaim
