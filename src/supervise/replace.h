#pragma once
// What `gpureap run` frees before it launches CMD (issue 37): `--replace KEY` (that
// server instance), `--replace-orphans` (the orphaned instances on CMD's GPUs) and
// `--free-first` (everything on --gpu). One safe shape for all three, through the one
// free session (reclaim/free_session.h):
//
//   look -> the selection (select_replaced) -> plan (live launchers joined so an
//   instance is freed whole: reclaim/whole_instances.h), nothing signalled
//   (preview_replace) -> the caller refuses a partial instance, asks (or, with no
//   terminal, acts only on what report::needs_confirmation allows) -> the free lock -> a fresh
//   look, whose plan may only be the confirmed one or less (plan_changed) -> reclaim,
//   verified (replace_confirmed) -> the old instance's ports (old_ports) closed.
//
// The plan is confirmed before the lock is taken, so that a prompt nobody answers
// never holds off a Slurm epilog or the reaper (W3-08). Prints nothing: cli/run_replace
// says each step through report/replace_report and report/run_report.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "gpu/gpu_select.h"
#include "reclaim/free_session.h"

namespace gpureap::supervise {

enum class ReplaceMode {
  free_first,       // --free-first: the holders of --gpu
  replace,          // --replace KEY: that server instance, whole
  replace_orphans,  // --replace-orphans: the orphaned instances on --gpu (default: all)
};

/// Why no selection could be made from a look.
enum class SelectProblem {
  none,
  no_such_instance,  // --replace KEY: no instance of the look has that key
  source_unusable,   // --gpu cannot be resolved, and NVML is unusable (problem_detail)
  bad_gpu,           // --gpu cannot be resolved on this node (problem_detail): a usage error
};

/// What a replacement frees, and how.
struct Replacement {
  ReplaceMode mode = ReplaceMode::free_first;
  std::string instance;     // --replace KEY
  gpu::GpuSelector gpu;     // --gpu (empty: every GPU)
  bool unattended = false;  // no --yes and no terminal to ask on
  reclaim::ReclaimOptions options;  // grace, timeout; the selection: select_replaced's
  SelectProblem problem = SelectProblem::none;  // the last select_replaced's
  std::string problem_detail;
};

/// The selection from `inv` into r.options.selection: --replace's instance and its GPUs,
/// or --gpu's GPUs (only orphans for --replace-orphans; unattended, only those
/// unattended action may touch). False (r.problem says why) when none can be made.
bool select_replaced(Replacement& r, const inventory::Inventory& inv);

/// Step 1, without the lock: a look, the selection, the plan; nothing is signalled. The
/// outcome's verdict is `stopped` with the plan to confirm, unless a judgement came
/// first (not_measured, nothing_idle, nothing_matched); end not_chosen when
/// select_replaced failed.
reclaim::FreeSession preview_replace(reclaim::Freer& freer, Replacement& r);

/// Why `later` (made under the lock) may not go ahead as `confirmed`, or "": a target
/// not confirmed, or an instance it would now free in part.
std::string plan_changed(const reclaim::Plan& later, const reclaim::Plan& confirmed);

/// Step 2: the free lock (waited for until `lock_until`; end lock_failed when not had),
/// then `locked()`, a fresh look, the selection again and a plan that must pass
/// plan_changed against `confirmed` (else verdict stopped, `changed` saying why),
/// reclaimed and verified with `progress`.
reclaim::FreeSession replace_confirmed(reclaim::Freer& freer, Replacement& r,
                                       const reclaim::Plan& confirmed,
                                       const std::string& state_dir,
                                       std::chrono::steady_clock::time_point lock_until,
                                       const std::function<void()>& locked,
                                       reclaim::ProgressFn progress, std::string& changed);

/// The ports of the plan's instances (their own and their members'), ascending, once each:
/// closed before the new server starts, or it would meet EADDRINUSE.
std::vector<unsigned> old_ports(const reclaim::Plan& plan);

}  // namespace gpureap::supervise
