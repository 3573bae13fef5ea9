#include "reclaim/release_wait.h"

#include <algorithm>
#include <thread>

namespace gpureap::reclaim {

ReleaseResult wait_for_release(
    gpu::GpuSource& gpus, const std::vector<ReleaseTarget>& targets, Clock::time_point deadline,
    Clock::time_point t0, const std::atomic<bool>* interrupted,
    const std::function<void(const std::vector<ReleaseState>&)>& progress) {
  ReleaseResult result;
  std::vector<unsigned> pending;
  for (const auto& t : targets) {
    result.gpus.push_back(ReleaseState{t.index, std::nullopt, std::nullopt, {}});
    pending.push_back(t.index);
  }
  // The driver frees memory asynchronously (about 0.2-0.4 s for tens of GiB on
  // an H200), so poll: first every 5 ms, backing off to 25 ms; each reading is
  // one round trip to the NVML helper, bounded by its own deadline.
  auto interval = std::chrono::milliseconds(5);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto reading = gpus.memory(
        pending, std::clamp(left, std::chrono::milliseconds(200), std::chrono::milliseconds(2000)));
    if (!reading) {
      result.nvml_error = reading.error().message;
      break;
    }
    double now = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const auto& r : *reading) {
      auto state = std::find_if(result.gpus.begin(), result.gpus.end(),
                                [&](const ReleaseState& s) { return s.index == r.index; });
      auto target = std::find_if(targets.begin(), targets.end(),
                                 [&](const ReleaseTarget& t) { return t.index == r.index; });
      if (state == result.gpus.end() || target == targets.end()) continue;
      if (!r.problem.empty()) {
        // Not measured is never freed; the other GPUs are still measured.
        state->problem = r.problem;
        if (!result.nvml_error.empty()) result.nvml_error += "; ";
        result.nvml_error += r.problem;
        continue;
      }
      state->used = r.used;
      if (r.used && *r.used <= target->threshold && !state->freed_at) state->freed_at = now;
    }
    if (progress) progress(result.gpus);
    std::erase_if(pending, [&](unsigned idx) {
      return std::any_of(result.gpus.begin(), result.gpus.end(), [&](const ReleaseState& s) {
        return s.index == idx && (s.freed_at || !s.problem.empty());
      });
    });
    if (pending.empty()) {
      result.all_freed = std::all_of(result.gpus.begin(), result.gpus.end(),
                                     [](const ReleaseState& s) { return s.freed_at.has_value(); });
      break;
    }
    if (interrupted && interrupted->load()) {
      result.interrupted = true;
      break;
    }
    if (Clock::now() + interval > deadline) break;
    std::this_thread::sleep_for(interval);
    interval = std::min(interval + std::chrono::milliseconds(5), std::chrono::milliseconds(25));
  }
  return result;
}

}  // namespace gpureap::reclaim
