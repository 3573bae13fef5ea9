#include "cluster/job_check.h"

#include <fmt/format.h>

#include <algorithm>

#include "cluster/running_jobs.h"
#include "proc/environ.h"
#include "reclaim/free_flow.h"
#include "reclaim/free_session.h"
#include "reclaim/leftovers.h"
#include "reclaim/release_wait.h"
#include "util/units.h"

namespace gpureap::cluster {
namespace {

using reclaim::Filters;
using reclaim::Selection;

constexpr std::string_view kJobVariable = "SLURM_JOB_ID";

// NVML's deadline for a look: the usual one, cut to what the deadline leaves; the
// process table from the look's own listing of /proc (CallerContext::of).
inventory::CollectOptions look_within(const reclaim::ReclaimOptions& o, util::Clock& clock) {
  inventory::CollectOptions look;
  look.process_table = true;
  return look.within(o.deadline, clock.now());
}

const inventory::GpuView* find_view(const inventory::Inventory& inv, gpu::DeviceId id) {
  for (const auto& v : inv.gpus)
    if (v.info.id == id) return &v;
  return nullptr;
}

template <typename T>
void add_once(std::vector<T>& to, const T& x) {
  if (std::find(to.begin(), to.end(), x) == to.end()) to.push_back(x);
}

// The first look: NVML must list the GPUs, and the job's must be among them. False
// (with out.error set) when the check cannot be made.
bool resolve(const inventory::Inventory& inv, const SlurmJob& job, JobCheck& out) {
  out.warnings = inv.warnings;
  out.warnings.insert(out.warnings.end(), job.notes.begin(), job.notes.end());
  if (!gpu::lists_gpus(inv.source_state)) {
    out.error = "NVML is unusable, so the GPUs' memory cannot be measured: " + inv.source_problem;
    return false;
  }
  if (job.gpu_spec().empty()) return true;
  auto selector = gpu::GpuSelector::parse(job.gpu_spec());
  auto gpus = selector ? inventory::select_gpus(*selector, inv)
                       : Result<std::vector<gpu::DeviceId>>(std::unexpected(selector.error()));
  if (!gpus) {
    out.error = fmt::format("the job's GPUs ({}) are not all on this node: {}", job.gpu_spec(),
                            gpus.error().message);
    return false;
  }
  out.job_gpus = *gpus;
  return true;
}

// Every GPU whose memory stays held after the reclaim, with the classes of its leftovers.
std::vector<HeldGpu> held_after(const reclaim::ReclaimReport& r) {
  std::vector<HeldGpu> out;
  for (const auto& g : r.gpus) {
    if (g.freed) continue;
    HeldGpu h{g.gpu, g.after() > g.baseline ? g.after() - g.baseline : 0, {}, {}};
    for (const auto& l : r.leftovers) {
      if (l.gpu != g.gpu) continue;
      add_once(h.classes, l.cls);
      for (pid_t p : l.pids) add_once(h.pids, p);
    }
    out.push_back(std::move(h));
  }
  return out;
}

// The one rule (inventory::gpu_state): at baseline, no process uses it (a monitoring
// client that only has the node open does not count), and not a ghost.
bool clean(const inventory::GpuView& v) {
  return inventory::gpu_state(v) == inventory::GpuState::free;
}

// running_job_of()'s rule as filters: a process in the cgroup of one of `jobs`, or with
// one of them as its SLURM_JOB_ID, does not pass `f` (W2-11: a worker of running job 43
// with a cleared environment is still job 43's, by its cgroup).
void exclude_jobs(Filters& f, const std::set<std::string>& jobs) {
  for (const auto& id : jobs) {
    f.env_none.push_back({std::string(kJobVariable), id});
    f.cgroup_none.push_back(job_cgroup_component(id));
  }
}

}  // namespace

Selection job_selection(const std::string& job_id, const std::vector<gpu::DeviceId>& job_gpus,
                        const std::set<std::string>& running_jobs) {
  // Each alternative excludes the running jobs' processes itself: add_processes_matching
  // and the respawner rule see the alternatives alone.
  std::set<std::string> others = running_jobs;
  others.erase(job_id);
  Selection sel;
  Filters by_env, by_cgroup;
  by_env.env = {{std::string(kJobVariable), job_id}};
  by_cgroup.cgroup_component = job_cgroup_component(job_id);
  sel.any_of = {by_env, by_cgroup};
  if (!job_gpus.empty()) {
    Filters orphans;
    orphans.orphans_only = true;
    orphans.unattended = true;
    orphans.on_gpus = job_gpus;
    sel.any_of.push_back(std::move(orphans));
  }
  for (auto& f : sel.any_of) exclude_jobs(f, others);
  return sel;
}

JobCheck clean_up_after_job(inventory::Node& node, reclaim::AuditedControl& control,
                            const SlurmJob& job, const reclaim::ReclaimOptions& options) {
  JobCheck out;
  inventory::Inventory inv = node.look(look_within(options, node.clock()));
  if (!resolve(inv, job, out)) return out;
  auto caller = reclaim::CallerContext::of(inv, node.proc_root());
  Selection sel = job_selection(job.id, out.job_gpus, running_jobs(caller.table, node.proc_root()));

  // The GPUs to verify: the job's, and any other its own processes use (without
  // ConstrainDevices a job can reach every GPU of the node): the GPUs the plan's
  // verdicts would give its own processes on every GPU (reclaim::target_gpus), so that
  // the one plan is the free session's.
  Selection own = sel;
  own.any_of.resize(2);  // by environment, by cgroup
  for (const auto& v : inv.gpus) own.gpus.push_back(v.info.id);
  out.checked = out.job_gpus;
  for (gpu::DeviceId g : reclaim::target_gpus(inv, own, caller)) add_once(out.checked, g);
  std::sort(out.checked.begin(), out.checked.end());
  sel.gpus = out.checked;

  // The one free flow (reclaim/free_flow.h), with the rest of the job added to its plan:
  // holding no GPU, an escaped server would start new workers. Not Slurm's own hooks,
  // which carry the job's variables too (another prolog or epilog script of the job;
  // SLURM_SCRIPT_CONTEXT marks them).
  reclaim::FreeSteps steps;
  steps.amend = [&](reclaim::Plan& plan) {
    reclaim::add_processes_matching(plan, own.any_of, caller,
                                    fmt::format("part of job {}, which has ended", job.id));
    std::erase_if(plan.targets, [&](const reclaim::Target& t) {
      if (!t.gpus.empty()) return false;
      auto environ = proc::read_environ(t.id, node.proc_root());
      return environ && proc::environ_value(*environ, "SLURM_SCRIPT_CONTEXT").has_value();
    });
  };
  // The one free session (reclaim/free_session.h), from this look (taken under the lock).
  reclaim::Freer freer{node, control};
  reclaim::FreeRequest request;
  request.options = options;
  request.options.selection = std::move(sel);
  request.taken = std::move(inv);
  request.steps = std::move(steps);
  reclaim::FreeOutcome freed = reclaim::free_session(freer, std::move(request)).outcome;
  out.plan = std::move(freed.plan);
  switch (freed.verdict) {
    case reclaim::FreeVerdict::nothing_idle:
    case reclaim::FreeVerdict::nothing_matched:
      return out;
    case reclaim::FreeVerdict::not_measured:
      // Never clean: a GPU whose memory cannot be read is held until measured.
      for (gpu::DeviceId g : freed.unreadable)
        out.held.push_back(HeldGpu{g, 0, {reclaim::LeftoverClass::source_failed}, {}});
      return out;
    default:
      break;
  }
  if (!freed.report) return out;
  out.freed = std::move(freed.report);
  out.held = held_after(*out.freed);
  // Memory still coming back at the deadline (within its release budget: releasing) is
  // no leak yet, but the node is not clean: it stays held (the epilog drains with a
  // "still releasing" reason), and the health check resumes it once the memory is back
  // at baseline (issue 50: an epilog never returns a dirty node).
  return out;
}

JobCheck check_before_job(inventory::Node& node, reclaim::AuditedControl& control,
                          const SlurmJob& job, const reclaim::ReclaimOptions& options,
                          bool free_orphans) {
  JobCheck out;
  util::Clock& clock = node.clock();
  inventory::Inventory inv = node.look(look_within(options, clock));
  if (!resolve(inv, job, out)) return out;
  out.checked = out.job_gpus;
  auto all_clean = [&](const inventory::Inventory& i) {
    return std::all_of(out.job_gpus.begin(), out.job_gpus.end(), [&](gpu::DeviceId g) {
      const auto* v = find_view(i, g);
      return v && clean(*v);
    });
  };
  if (all_clean(inv)) return out;

  if (free_orphans) {
    auto caller = reclaim::CallerContext::of(inv, node.proc_root());
    Selection sel;
    sel.gpus = out.job_gpus;
    sel.orphans_only = true;
    sel.unattended = true;
    exclude_jobs(sel, running_jobs(caller.table, node.proc_root()));
    // The one free session (reclaim/free_session.h), from this look; only a plan with
    // targets goes ahead (what stays is judged below).
    reclaim::Freer freer{node, control};
    reclaim::FreeRequest request;
    request.options = options;
    request.options.selection = std::move(sel);
    request.taken = std::move(inv);
    request.steps.go_ahead = [](const reclaim::Plan& plan) { return !plan.targets.empty(); };
    reclaim::FreeOutcome freed = reclaim::free_session(freer, std::move(request)).outcome;
    out.plan = std::move(freed.plan);
    out.freed = std::move(freed.report);
    inv = node.look(look_within(options, clock));
  }

  // Memory of the previous job still coming back (releasing, or no holder and not yet
  // known: the release model) is waited for within the deadline: the node is drained only
  // for memory the model calls driver-held (flat past the release budget) or holders.
  bool releasing = std::any_of(out.job_gpus.begin(), out.job_gpus.end(), [&](gpu::DeviceId g) {
    const auto* v = find_view(inv, g);
    const auto state = v ? inventory::gpu_state(*v) : inventory::GpuState::not_measured;
    return state == inventory::GpuState::releasing || state == inventory::GpuState::no_holder;
  });
  if (releasing) {
    std::vector<reclaim::GpuRelease> gpus;
    for (gpu::DeviceId g : out.job_gpus) {
      const auto* v = find_view(inv, g);
      if (!v || !v->info.memory) continue;
      gpus.push_back(reclaim::release_of(*v));
    }
    auto until = options.deadline ? *options.deadline - reclaim::kClassifyReserve
                                  : clock.now() + options.stalled_after;
    reclaim::wait_for_release(node.gpus(), gpus, until, clock.now(), node.interrupt_flag(), {},
                              clock, &node.releases());
    inv = node.look(look_within(options, clock));
  }

  for (gpu::DeviceId g : out.job_gpus) {
    const auto* v = find_view(inv, g);
    if (!v || clean(*v)) continue;
    HeldGpu h{g, v->used() > v->baseline.bytes ? v->used() - v->baseline.bytes : 0, {}, {}};
    if (!v->info.memory)
      h.classes.push_back(reclaim::LeftoverClass::source_failed);
    else
      for (const auto& l : reclaim::classify_leftovers(
               {v,
                nullptr,
                {},
                v->baseline.bytes + inventory::freed_tolerance(v->info.memory->total),
                {}},
               node.proc_root())) {
        add_once(h.classes, l.cls);
        for (pid_t p : l.pids) add_once(h.pids, p);
      }
    out.held.push_back(std::move(h));
  }
  return out;
}

}  // namespace gpureap::cluster
