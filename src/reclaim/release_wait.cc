#include "reclaim/release_wait.h"

#include <algorithm>
#include <set>

namespace gpureap::reclaim {
namespace {

// Takes one round of readings into `result`: the latest use, when each GPU was first
// seen freed, and why a GPU could not be read (not measured is never freed; the other
// GPUs are still measured).
void record(const std::vector<gpu::MemoryReading>& readings, double now, ReleaseResult& result,
            std::set<unsigned>& freed_now) {
  for (const auto& r : readings) {
    auto g = std::find_if(result.gpus.begin(), result.gpus.end(),
                          [&](const GpuRelease& x) { return x.index == r.index; });
    if (g == result.gpus.end()) continue;
    if (!r.problem.empty()) {
      g->problem = r.problem;
      if (!result.nvml_error.empty()) result.nvml_error += "; ";
      result.nvml_error += r.problem;
      continue;
    }
    if (r.used) g->used = r.used;
    if (r.used && *r.used <= g->threshold) {
      freed_now.insert(g->index);
      if (!g->freed_at) g->freed_at = now;
    }
  }
}

}  // namespace

ReleaseResult wait_for_release(gpu::GpuSource& source, std::vector<GpuRelease> gpus,
                               util::Clock::time_point deadline, util::Clock::time_point t0,
                               const std::atomic<bool>* interrupted,
                               const std::function<void(const std::vector<GpuRelease>&)>& progress,
                               util::Clock& clock) {
  ReleaseResult result;
  result.gpus = std::move(gpus);
  std::vector<unsigned> pending;
  std::set<unsigned> freed_now;  // seen freed during this wait
  for (auto& g : result.gpus) {
    if (!g.measured) continue;  // NVML could not read it to begin with: never polled
    g.problem.clear();
    pending.push_back(g.index);
  }
  const std::size_t watched = pending.size();
  // The driver frees memory asynchronously (about 0.2-0.4 s for tens of GiB on
  // an H200), so poll: first every 5 ms, backing off to 25 ms; each reading is
  // one round trip to the NVML helper, bounded by its own deadline.
  auto interval = std::chrono::milliseconds(5);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.now());
    auto reading = source.memory(
        pending, std::clamp(left, std::chrono::milliseconds(200), std::chrono::milliseconds(2000)));
    if (!reading) {
      result.nvml_error = reading.error().message;
      break;
    }
    record(*reading, std::chrono::duration<double>(clock.now() - t0).count(), result, freed_now);
    if (progress) progress(result.gpus);
    std::erase_if(pending, [&](unsigned idx) {
      return freed_now.contains(idx) ||
             std::any_of(result.gpus.begin(), result.gpus.end(),
                         [&](const GpuRelease& g) { return g.index == idx && !g.problem.empty(); });
    });
    if (pending.empty()) {
      result.all_freed = freed_now.size() == watched;
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
