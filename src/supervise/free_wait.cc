#include "supervise/free_wait.h"

#include <algorithm>
#include <thread>

#include "reclaim/release_wait.h"
#include "util/clock.h"

namespace gpureap::supervise {

using Clock = std::chrono::steady_clock;
using util::seconds_since;

FreeWaitResult wait_until_free(inventory::Node& node, const FreeWaitOptions& options) {
  FreeWaitResult result;
  const auto t0 = Clock::now();
  const auto deadline = t0 + options.timeout;

  // 1. One inventory: the GPUs, their baselines, and who holds them now.
  auto inv = node.look();
  (void)node.save_baselines();
  result.warnings = inv.warnings;
  if (node.device_error())
    result.warnings.insert(result.warnings.begin(), node.device_error()->message);
  if (!gpu::lists_gpus(inv.nvml_state)) {
    result.message = inv.nvml_problem.empty() ? "NVML is not usable" : inv.nvml_problem;
    return result;
  }

  // 2. Select, and set each GPU's threshold: baseline + below.
  auto chosen = inventory::select_gpus(options.gpus, inv);
  if (!chosen) {
    result.status = FreeWaitResult::Status::bad_selection;
    result.message = chosen.error().message;
    return result;
  }
  for (const auto& v : inv.gpus) {
    if (!inventory::is_selected(*chosen, v.info.id)) continue;
    reclaim::GpuRelease g = reclaim::release_of(v, 0, options.below);
    if (inventory::gpu_state(v) == inventory::GpuState::ghost)
      result.ghosts[g.gpu] = v.busy.detail;
    if (v.info.memory) {
      g.used = v.used();
      if (*g.used <= g.threshold && !result.ghosts.contains(g.gpu))
        g.freed_at = seconds_since(t0);
    } else {
      // A selected GPU that NVML cannot read can never be seen free: say so now
      // (the GPUs that were not selected do not matter).
      if (!result.message.empty()) result.message += "; ";
      result.message +=
          v.info.problem.empty() ? "GPU " + gpu::device_text(g.gpu) + ": " + g.problem : g.problem;
    }
    result.gpus.push_back(std::move(g));
  }
  if (!result.message.empty()) return result;

  // 3. Poll until all are at or below their thresholds in the same reading, or the
  //    deadline: every selected GPU is read every time, so one taken again after it was
  //    seen free is not counted free (W2-14). A ghost is never free.
  bool all_free = result.ghosts.empty() &&
                  std::all_of(result.gpus.begin(), result.gpus.end(),
                              [](const reclaim::GpuRelease& g) { return g.freed_at.has_value(); });
  auto poll_until_deadline = [&] {
    auto release = reclaim::wait_for_release(node.gpus(), result.gpus, deadline, t0, nullptr, {});
    result.gpus = std::move(release.gpus);
    for (auto& g : result.gpus)
      if (result.ghosts.contains(g.gpu)) g.freed_at.reset();
    all_free = release.all_freed && result.ghosts.empty();
    return release.nvml_error;
  };
  std::string nvml_error;
  if (!all_free && options.timeout.count() > 0) nvml_error = poll_until_deadline();
  if (!all_free && nvml_error.empty() && Clock::now() < deadline) {
    // The poller stops when its next interval would overshoot the deadline;
    // the last reading belongs at the deadline itself, so that --timeout
    // means what it says.
    std::this_thread::sleep_until(deadline);
    nvml_error = poll_until_deadline();
  }
  if (!nvml_error.empty()) {
    result.message = nvml_error;
    result.seconds = seconds_since(t0);
    return result;
  }
  result.seconds = seconds_since(t0);
  if (all_free) {
    result.status = FreeWaitResult::Status::free;
    return result;
  }

  // 4. Timed out: who holds what now, for the caller's summary.
  result.status = FreeWaitResult::Status::timed_out;
  auto after = node.look();
  inventory::keep_gpus(after, *chosen);
  after.warnings.clear();  // already in result.warnings: said once
  result.holders = std::move(after);
  return result;
}

}  // namespace gpureap::supervise
