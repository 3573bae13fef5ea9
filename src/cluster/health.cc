#include "cluster/health.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

#include "cluster/running_jobs.h"
#include "proc/environ.h"
#include "reclaim/free_lock.h"
#include "reclaim/plan.h"

namespace gpureap::cluster {
namespace {

// What one look finds held, per GPU. Memory no process holds counts when the release
// model calls it driver-held (flat past the release budget); on the first look, memory
// it cannot tell yet (no_holder) is a candidate too: the second look, `persist` later,
// decides with what the node's looks saw in between.
std::map<gpu::DeviceId, HeldGpu> held_in(const inventory::Inventory& inv,
                                         const std::vector<gpu::DeviceId>& gpus,
                                         const std::string& proc_root,
                                         std::vector<std::string>& warnings, bool first_look) {
  auto ctx = reclaim::CallerContext::current(proc_root);
  const auto running = running_jobs(ctx.table, proc_root);
  std::map<gpu::DeviceId, HeldGpu> out;
  for (const auto& v : inv.gpus) {
    if (!inventory::is_selected(gpus, v.info.id) || !v.info.memory) continue;
    HeldGpu h{v.info.id, 0, {}, {}};
    const auto state = inventory::gpu_state(v);
    if (state == inventory::GpuState::driver_held ||
        (first_look && state == inventory::GpuState::no_holder)) {
      h.bytes += v.unattributed_bytes;
      h.classes.push_back(reclaim::LeftoverClass::driver_held);
    }
    for (const auto& gh : v.holders) {
      const auto& p = gh.holder;
      if (!gh.uses_gpu || reclaim::protection_reason(p.id.pid, p.comm, false, ctx, false)) continue;
      // A running job's cgroup settles it without the environment (W2-11).
      if (running_job_of(p.cgroup, std::nullopt, running)) continue;
      auto environ = proc::read_environ(p.id, proc_root);
      if (!environ) {
        if (environ.error().sys_errno != ESRCH)
          warnings.push_back(environ.error().message +
                             "; cannot tell whether it belongs to a running job: not counted");
        continue;
      }
      auto job = proc::environ_value(*environ, "SLURM_JOB_ID");
      if (running_job_of(p.cgroup, job, running)) continue;
      // A finished job's process, or a process of no job that lost its parent: orphaned
      // or detached alike (a nohup'd server outside Slurm still takes the memory a job
      // would need; draining signals nothing).
      if (!job && !p.orphaned && !p.detached) continue;
      h.bytes += gh.gpu_bytes.value_or(0);
      if (std::find(h.classes.begin(), h.classes.end(), reclaim::LeftoverClass::live_holder) ==
          h.classes.end())
        h.classes.push_back(reclaim::LeftoverClass::live_holder);
      h.pids.push_back(p.id.pid);
    }
    // A ghost GPU (busy with no process) holds no memory, yet a job there would crawl.
    const bool ghost = inventory::gpu_state(v) == inventory::GpuState::ghost;
    if (ghost) h.classes.push_back(reclaim::LeftoverClass::ghost_gpu);
    if (ghost || h.bytes > inventory::freed_tolerance(v.info.memory->total))
      out.emplace(h.gpu, h);
  }
  return out;
}

// The selected GPUs whose memory no process holds and the release model does not call
// driver-held yet: still coming back (HealthCheck::releasing).
std::vector<gpu::DeviceId> releasing_in(const inventory::Inventory& inv,
                                        const std::vector<gpu::DeviceId>& gpus) {
  std::vector<gpu::DeviceId> out;
  for (const auto& v : inv.gpus) {
    const auto state = inventory::gpu_state(v);
    if (inventory::is_selected(gpus, v.info.id) &&
        (state == inventory::GpuState::releasing || state == inventory::GpuState::no_holder))
      out.push_back(v.info.id);
  }
  return out;
}

// The free lock for one look (W2-13): an epilog, a prolog or a `gpureap free` that is
// freeing holds it, and the memory it is releasing is no leak. Waited for until
// options.lock_until; an error when still held then. Null when no lock is asked for, or
// when it cannot be used at all (warned: the look is made without it, as before locks).
Result<std::unique_ptr<reclaim::FreeLock>> lock_for_look(const HealthOptions& options,
                                                         std::vector<std::string>& warnings) {
  if (options.lock_dir.empty()) return nullptr;
  auto lock = reclaim::FreeLock::acquire(options.lock_dir, options.lock_until);
  if (lock) return std::make_unique<reclaim::FreeLock>(std::move(*lock));
  if (lock.error().sys_errno == EWOULDBLOCK) return std::unexpected(lock.error());
  warnings.push_back(lock.error().message + "; looked without waiting for a free in progress");
  return nullptr;
}

}  // namespace

HealthCheck check_node_health(inventory::Node& node, const HealthOptions& options) {
  HealthCheck out;
  auto held_first = lock_for_look(options, out.warnings);
  if (!held_first) {
    out.skipped = held_first.error().message;
    return out;
  }
  auto first = node.look();
  out.warnings.insert(out.warnings.end(), first.warnings.begin(), first.warnings.end());
  if (!gpu::lists_gpus(first.source_state)) {
    out.error = "NVML is unusable, so the GPUs' memory cannot be measured: " + first.source_problem;
    return out;
  }
  auto gpus = inventory::select_gpus(
      options.gpus.empty() ? gpu::GpuSelector::every_gpu() : options.gpus, first);
  if (!gpus) {
    out.usage_error = "--gpu: " + gpus.error().message;
    return out;
  }
  out.checked = *gpus;
  for (const auto& v : first.gpus)
    if (inventory::is_selected(out.checked, v.info.id) && !v.info.problem.empty())
      out.held.push_back({v.info.id, 0, {reclaim::LeftoverClass::source_failed}, {}});
  auto before = held_in(first, out.checked, node.proc_root(), out.warnings, true);
  held_first->reset();
  if (before.empty()) {
    out.releasing = releasing_in(first, out.checked);
    return out;
  }
  node.clock().sleep_for(options.persist);
  std::vector<std::string> ignored;  // said once, by the first look
  auto held_second = lock_for_look(options, ignored);
  if (!held_second) {
    out.held.clear();
    out.skipped = held_second.error().message;
    return out;
  }
  auto second = node.look();
  for (auto& [id, h] : held_in(second, out.checked, node.proc_root(), ignored, false))
    if (before.contains(id)) out.held.push_back(std::move(h));
  out.releasing = releasing_in(second, out.checked);
  std::sort(out.held.begin(), out.held.end(),
            [](const HeldGpu& a, const HeldGpu& b) { return a.gpu < b.gpu; });
  return out;
}

HealthAction decide_health_action(bool healthy, const NodeState& node, bool memory_back) {
  if (node.drained()) {
    if (!node.drained_by_gpureap()) return HealthAction::leave_alone;
    return healthy && memory_back ? HealthAction::resume : HealthAction::keep;
  }
  // DOWN or FAIL is someone else's verdict (slurmctld's, an administrator's).
  for (std::string_view word : {"DOWN", "FAIL"})
    if (node.state.find(word) != std::string::npos) return HealthAction::leave_alone;
  return healthy ? HealthAction::none : HealthAction::drain;
}

}  // namespace gpureap::cluster
