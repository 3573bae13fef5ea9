#include "supervise/free_wait.h"

#include <algorithm>

#include "gpu/mig.h"
#include "inventory/collect.h"
#include "reclaim/release_wait.h"
#include "util/clock.h"

namespace gpureap::supervise {

namespace {

using TimePoint = util::Clock::time_point;

// Seconds from `t0` until now on the node's clock.
double clock_seconds(util::Clock& clock, TimePoint t0) {
  return std::chrono::duration<double>(clock.now() - t0).count();
}

// A compute instance of the same GPU instance as `view` (gpu/mig.h, shares_memory)
// that is not selected itself.
bool unselected_sibling(const inventory::GpuView& view, const inventory::GpuView& other,
                        const std::vector<gpu::DeviceId>& chosen) {
  return gpu::shares_memory(view.info, other.info) &&
         !inventory::is_selected(chosen, other.info.id);
}

// What the holders of `view`'s sibling compute instances use, when they are not selected
// themselves: the compute instances of one GPU instance report its memory (gpu/mig.h,
// shares_memory), so on each, what the others' holders use is explained by them, the rule
// `free` and `status` follow (W3-05). With every compute instance of a GPU instance
// selected, nothing is subtracted: the wait is then on the GPU instance's memory.
std::uint64_t sibling_bytes(const inventory::Inventory& inv, const inventory::GpuView& view,
                            const std::vector<gpu::DeviceId>& chosen) {
  std::uint64_t bytes = 0;
  for (const auto& other : inv.gpus)
    if (unselected_sibling(view, other, chosen)) bytes += other.attributed_bytes;
  return bytes;
}

bool shares_with_unselected(const inventory::Inventory& inv, const inventory::GpuView& view,
                            const std::vector<gpu::DeviceId>& chosen) {
  return std::any_of(inv.gpus.begin(), inv.gpus.end(), [&](const inventory::GpuView& other) {
    return unselected_sibling(view, other, chosen);
  });
}

// 2. Each selected GPU's threshold (baseline + below), whether it is free already, and
//    whether it is a ghost; a selected GPU NVML cannot read is said in result.message.
//    Returns whether a selected compute instance shares memory with an unselected one.
bool set_thresholds(const inventory::Inventory& inv, const std::vector<gpu::DeviceId>& chosen,
                    std::optional<std::uint64_t> below, util::Clock& clock, TimePoint t0,
                    FreeWaitResult& result) {
  bool siblings = false;
  for (const auto& v : inv.gpus) {
    if (!inventory::is_selected(chosen, v.info.id)) continue;
    siblings = siblings || shares_with_unselected(inv, v, chosen);
    reclaim::GpuRelease g = reclaim::release_of(v, sibling_bytes(inv, v, chosen), below);
    if (inventory::gpu_state(v) == inventory::GpuState::ghost)
      result.ghosts[g.gpu] = v.busy.detail;
    if (v.info.memory) {
      g.used = v.used();
      if (*g.used <= g.threshold && !result.ghosts.contains(g.gpu))
        g.freed_at = clock_seconds(clock, t0);
    } else {
      // A selected GPU that NVML cannot read can never be seen free: say so now
      // (the GPUs that were not selected do not matter).
      if (!result.message.empty()) result.message += "; ";
      result.message +=
          v.info.problem.empty() ? "GPU " + gpu::device_text(g.gpu) + ": " + g.problem : g.problem;
    }
    result.gpus.push_back(std::move(g));
  }
  return siblings;
}

// The polls of step 3, until every selected GPU is free in one reading or the deadline.
struct FreePoller {
  inventory::Node& node;
  const std::vector<gpu::DeviceId>& chosen;
  bool siblings;
  TimePoint t0, deadline;
  FreeWaitResult& result;
  bool all_free = false;

  // One reading of the look `now_inv`: false when a GPU is not free in it; a GPU it
  // cannot read is returned in `problem`.
  bool read_look(const inventory::Inventory& now_inv, std::string& problem) {
    bool every = true;
    for (auto& g : result.gpus) {
      const inventory::GpuView* v = nullptr;
      for (const auto& x : now_inv.gpus)
        if (x.info.id == g.gpu) v = &x;
      if (!v || !v->info.memory) {
        g.problem = v && !v->info.problem.empty() ? v->info.problem : "NVML gives no memory figure";
        problem = "GPU " + gpu::device_text(g.gpu) + ": " + g.problem;
        return false;
      }
      const std::uint64_t left = sibling_bytes(now_inv, *v, chosen);
      g.threshold = g.threshold - g.left_alone_bytes + left;
      g.left_alone_bytes = left;
      g.used = v->used();
      if (*g.used <= g.threshold && !result.ghosts.contains(g.gpu)) {
        if (!g.freed_at) g.freed_at = clock_seconds(node.clock(), t0);
      } else {
        g.freed_at.reset();
        every = false;
      }
    }
    return every;
  }

  // With siblings, what their holders use changes while we wait: each poll is a look
  // (holders and memory), the threshold re-read from it.
  std::string poll_looks() {
    auto interval = std::chrono::milliseconds(20);
    inventory::CollectOptions light;
    light.reread_unexplained = false;
    light.sample_busy = false;
    for (;;) {
      auto now_inv = node.look(light);
      if (!gpu::lists_gpus(now_inv.source_state))
        return now_inv.source_problem.empty() ? "NVML is not usable" : now_inv.source_problem;
      std::string problem;
      if (read_look(now_inv, problem)) {
        all_free = true;
        return {};
      }
      if (!problem.empty()) return problem;
      if (node.clock().now() + interval > deadline) return {};
      node.clock().sleep_for(interval);
      interval = std::min(interval + std::chrono::milliseconds(10), std::chrono::milliseconds(100));
    }
  }

  // Otherwise memory alone. Returns the driver's error, empty when none.
  std::string poll_until_deadline() {
    if (siblings) return poll_looks();
    auto release = reclaim::wait_for_release(node.gpus(), result.gpus, deadline, t0,
                                             nullptr, {}, node.clock(),
                                             &node.releases());
    result.gpus = std::move(release.gpus);
    for (auto& g : result.gpus)
      if (result.ghosts.contains(g.gpu)) g.freed_at.reset();
    all_free = release.all_freed && result.ghosts.empty();
    return release.source_error;
  }

  // 3. Poll until all are at or below their thresholds in the same reading, or the
  //    deadline: every selected GPU is read every time, so one taken again after it was
  //    seen free is not counted free (W2-14). A ghost is never free.
  std::string poll(std::chrono::milliseconds timeout) {
    all_free = result.ghosts.empty() &&
               std::all_of(result.gpus.begin(), result.gpus.end(),
                           [](const reclaim::GpuRelease& g) { return g.freed_at.has_value(); });
    std::string source_error;
    if (!all_free && timeout.count() > 0) source_error = poll_until_deadline();
    if (!all_free && source_error.empty() && node.clock().now() < deadline) {
      // The poller stops when its next interval would overshoot the deadline;
      // the last reading belongs at the deadline itself, so that --timeout
      // means what it says.
      node.clock().sleep_until(deadline);
      source_error = poll_until_deadline();
    }
    return source_error;
  }
};

}  // namespace

FreeWaitResult wait_until_free(inventory::Node& node, const FreeWaitOptions& options) {
  FreeWaitResult result;
  util::Clock& clock = node.clock();  // the node's: every wait of gpureap on one clock
  const auto t0 = clock.now();
  const auto deadline = t0 + options.timeout;

  // 1. One inventory: the GPUs, their baselines, and who holds them now.
  auto inv = node.look();
  (void)node.save_baselines();
  result.warnings = inv.warnings;
  if (node.device_error())
    result.warnings.insert(result.warnings.begin(), node.device_error()->message);
  if (!gpu::lists_gpus(inv.source_state)) {
    result.message = inv.source_problem.empty() ? "NVML is not usable" : inv.source_problem;
    return result;
  }

  // 2. Select, and set each GPU's threshold: baseline + below.
  auto chosen = inventory::select_gpus(options.gpus, inv);
  if (!chosen) {
    result.status = FreeWaitResult::Status::bad_selection;
    result.message = chosen.error().message;
    return result;
  }
  const bool siblings = set_thresholds(inv, *chosen, options.below, clock, t0, result);
  if (!result.message.empty()) return result;
  // A ghost is busy with no process: only a reset or a reboot ends it, so waiting out the
  // timeout would only delay the answer (issue 35).
  if (!result.ghosts.empty()) {
    result.status = FreeWaitResult::Status::ghost;
    result.seconds = clock_seconds(clock, t0);
    return result;
  }

  // 3. Poll.
  FreePoller poller{node, *chosen, siblings, t0, deadline, result, false};
  const std::string source_error = poller.poll(options.timeout);
  result.seconds = clock_seconds(clock, t0);
  if (!source_error.empty()) {
    result.message = source_error;
    return result;
  }
  if (poller.all_free) {
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
