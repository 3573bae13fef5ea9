#include "supervise/run_gpus.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>

#include "proc/cgroup_fs.h"
#include "proc/process_table.h"

namespace gpureap::supervise {
namespace {

constexpr std::chrono::milliseconds kSourceDeadline{2000};
constexpr std::chrono::milliseconds kMaxSampleInterval{5000};

}  // namespace

bool belongs_to_run(pid_t pid, pid_t reaper, const RunCgroup* cgroup,
                    const std::string& proc_root) {
  if (cgroup) {
    const std::string path = proc::cgroup2_path_of(pid, proc_root);
    if (!path.empty() &&
        (path == cgroup->cgroup_path() || path.starts_with(cgroup->cgroup_path() + "/")))
      return true;
  }
  auto up = proc::ancestors(pid, proc_root);
  return std::find(up.begin(), up.end(), reaper) != up.end();
}

RunGpuWatch::RunGpuWatch(inventory::Node& node)
    : node_(node), next_sample_(Clock::now() + interval_) {
  if (node_.device_error()) source_problem_ = node_.device_error()->message;
}

std::vector<std::string> RunGpuWatch::warnings() const {
  std::vector<std::string> out = node_.devices().warnings();
  const auto& refused = node_.baselines().warnings();
  out.insert(out.end(), refused.begin(), refused.end());
  return out;
}

void RunGpuWatch::fail(gpu::SourceState state, std::string problem) {
  source_failed_ = true;
  source_failure_ = state;
  source_problem_ = std::move(problem);
  next_sample_ = Clock::time_point::max();
}

void RunGpuWatch::sample(pid_t reaper, const RunCgroup* cgroup) {
  interval_ = std::min(interval_ * 2, kMaxSampleInterval);
  next_sample_ = Clock::now() + interval_;
  if (source_failed_) {
    next_sample_ = Clock::time_point::max();
    return;
  }
  if (ids_.empty()) {
    auto snap = node_.gpus().snapshot(kSourceDeadline);
    if (!gpu::lists_gpus(snap.state) || snap.gpus.empty()) {
      fail(snap.gpus.empty() && gpu::lists_gpus(snap.state) ? gpu::SourceState::library_missing
                                                              : snap.state,
           snap.problem.empty() ? "NVML lists no GPU" : snap.problem);
      return;
    }
    // A GPU NVML cannot read is left to the teardown's inventory, which says so.
    for (const auto& g : snap.gpus)
      if (g.problem.empty()) ids_.push_back(g.id);
    if (ids_.empty()) {
      next_sample_ = Clock::time_point::max();
      return;
    }
  }
  auto readings = node_.gpus().memory(ids_, kSourceDeadline);
  if (!readings) {
    fail(gpu::SourceState::query_failed, readings.error().message);
    return;
  }
  for (const auto& r : *readings) {
    if (sampled_.contains(r.id) || !r.problem.empty()) continue;
    for (auto pid : r.pids) {
      if (belongs_to_run(static_cast<pid_t>(pid), reaper, cgroup, node_.proc_root())) {
        sampled_.insert(r.id);
        break;
      }
    }
  }
}

inventory::Inventory RunGpuWatch::inventory(const std::set<pid_t>& exclude) {
  inventory::CollectOptions options;
  options.exclude = exclude;
  options.source_deadline = kSourceDeadline;
  return node_.look(options);
}

void RunGpuWatch::before_teardown(const std::vector<proc::ProcessId>& members) {
  // No driver: nothing can hold GPU memory, so there is nothing to verify.
  auto no_driver = [](gpu::SourceState s) {
    return s == gpu::SourceState::library_missing || s == gpu::SourceState::init_failed;
  };
  if (source_failed_ && no_driver(source_failure_)) return;
  if (members.empty() && sampled_.empty() && !source_failed_) return;
  auto inv = inventory({});
  if (inv.source_state == gpu::SourceState::query_failed) {
    // The worker may have been killed (a signal to the whole cgroup): NvmlSource
    // starts a new one for the next call, so ask once more.
    inv = inventory({});
  }
  if (!gpu::lists_gpus(inv.source_state)) {
    if (no_driver(inv.source_state)) return;
    fail(inv.source_state, inv.source_problem);
    unverified_ = inv.source_problem.empty() ? "NVML is not usable" : inv.source_problem;
    return;
  }
  if (members.empty() && sampled_.empty()) return;
  members_ = members;
  for (const auto& view : inv.gpus) {
    std::uint64_t run_bytes = 0;
    std::uint64_t other_bytes = 0;
    bool held = sampled_.contains(view.info.id);
    for (const auto& gh : view.holders) {
      if (!gh.uses_gpu) continue;
      if (std::find(members.begin(), members.end(), gh.holder.id) == members.end()) {
        other_bytes += gh.gpu_bytes.value_or(0);
        continue;
      }
      held = true;
      run_bytes += gh.gpu_bytes.value_or(0);
      MemberGpus& m = member_gpus_[gh.holder.id];
      m.gpus.push_back(view.info.id);
      m.bytes += gh.gpu_bytes.value_or(0);
    }
    if (!held) continue;
    // What other processes hold on this GPU stays held after our teardown: "freed"
    // means the run's share is gone, not that the GPU is idle. Held by the run and
    // unreadable by NVML: its release cannot be shown (not measured).
    reclaim::GpuRelease g = reclaim::release_of(view, other_bytes);
    g.own_bytes = run_bytes;
    held_.push_back(std::move(g));
  }
  (void)node_.save_baselines();
}

std::vector<reclaim::Leftover> RunGpuWatch::classify(
    const std::vector<gpu::DeviceId>& not_freed, const std::vector<proc::ProcessId>& survivors) {
  std::vector<reclaim::Leftover> out;
  if (not_freed.empty()) return out;
  auto inv = inventory({});
  for (const auto& view : inv.gpus) {
    if (std::find(not_freed.begin(), not_freed.end(), view.info.id) == not_freed.end()) continue;
    // Holders that are not processes of this run were never ours to signal.
    reclaim::Plan plan;
    for (const auto& gh : view.holders) {
      if (!gh.uses_gpu ||
          std::find(members_.begin(), members_.end(), gh.holder.id) != members_.end())
        continue;
      if (std::find(survivors.begin(), survivors.end(), gh.holder.id) != survivors.end()) continue;
      plan.skipped.push_back(reclaim::Skipped{gh.holder.id,
                                              gh.holder.comm,
                                              {view.info.id},
                                              gh.gpu_bytes.value_or(0),
                                              reclaim::SkipKind::not_matched,
                                              "not a process of this run"});
    }
    auto held = std::find_if(held_.begin(), held_.end(),
                             [&](const reclaim::GpuRelease& h) { return h.gpu == view.info.id; });
    reclaim::LeftoverInput in;
    in.view = &view;
    in.last_plan = &plan;
    in.survivors = survivors;
    in.threshold = held != held_.end() ? held->threshold : view.baseline.bytes;
    auto classified = reclaim::classify_leftovers(in, node_.proc_root());
    out.insert(out.end(), classified.begin(), classified.end());
  }
  return out;
}

}  // namespace gpureap::supervise
